"""Hostile input on the read and verify paths: mutated archives and indexes of real ledgers.

Every mutation must end in a verdict (``check`` exit 0 or 1) or a LedgerError naming a file
of the ledger; the native kernel, the streaming reader (``Ledger.read_body``/``bodies``) and
the independent oracle (oracles/archive_reader.py) must agree body for body; a body whose bytes
changed is never returned as good; a ledger with any body that does not verify is never
called sound; and memory stays within the format's block ceiling however far a payload
claims to inflate. scripts/soak runs the same campaigns for longer.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import zstandard
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.reliability_helpers import (
    ARCHIVE_MUTATIONS,
    MAX_BLOCK_RAW,
    U32_MAX,
    copy_ledger_files,
    index_rows,
    layout,
    mutate_archive,
    mutate_index,
    observe,
    assert_consistent,
    replace_bytes,
    sql,
    write_fixture,
    write_tiny,
)

from capsem_core import errors
from capsem_core import format as fmt
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.check import check_ledger
from capsem_core.ledger import Ledger
from capsem_core.writer import LedgerWriter

TESTS = Path(__file__).parent
ARCHIVE_EXAMPLES = int(os.environ.get("CAPSEM_FUZZ_EXAMPLES", "120"))
INDEX_EXAMPLES = int(os.environ.get("CAPSEM_FUZZ_INDEX_EXAMPLES", "60"))
# CI runs a fixed example sequence; scripts/soak sets CAPSEM_FUZZ_RANDOM=1 and a --hypothesis-seed
# so each soak explores new examples and any failure can be replayed from its seed.
_FUZZ = dict(deadline=None, derandomize=not os.environ.get("CAPSEM_FUZZ_RANDOM"), database=None,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=["deflate", "zstd"])
def pristine(request, tmp_path_factory) -> tuple[Path, dict]:
    """A sound ledger of real sample bodies: several blocks, several segments each."""
    directory = tmp_path_factory.mktemp(f"pristine-{request.param}")
    committed = write_fixture(directory, codec=request.param, seed=3, count=18)
    blocks = layout((directory / "session.bodies").read_bytes())
    assert len(blocks) >= 2 and any(len(b.segments) >= 3 for b in blocks)
    return directory, {c.key: c.data for c in committed}


@pytest.fixture(scope="module")
def work(pristine, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("work")
    copy_ledger_files(pristine[0], directory)
    return directory


# --- random campaigns ------------------------------------------------------------------------

@settings(max_examples=ARCHIVE_EXAMPLES, **_FUZZ)
@given(seed=st.integers(0, 2**64 - 1), kind=st.sampled_from(ARCHIVE_MUTATIONS))
def test_a_mutated_archive_gets_a_verdict_and_never_yields_changed_bytes(pristine, work, seed, kind):
    source, committed = pristine
    mutation = mutate_archive(random.Random(seed), (source / "session.bodies").read_bytes(), kind)
    replace_bytes(work / "session.bodies", mutation.data)
    obs = observe(work, run_cli=seed % 4 == 0)
    assert_consistent(obs, committed)
    if mutation.harmless:
        # Only bytes no extent covers changed: zero false damage.
        assert obs.check_sound and obs.stream_good == committed, mutation.detail


@settings(max_examples=INDEX_EXAMPLES, **_FUZZ)
@given(seed=st.integers(0, 2**64 - 1), changes=st.integers(1, 3))
def test_hostile_index_rows_get_a_verdict_and_never_yield_unverified_bytes(pristine, tmp_path_factory, seed,
                                                                           changes):
    source, committed = pristine
    directory = tmp_path_factory.mktemp("index")
    copy_ledger_files(source, directory)
    rng = random.Random(seed)
    for _ in range(changes):
        mutate_index(rng, directory / "session.db")
    obs = observe(directory, run_cli=seed % 4 == 0)
    # Rows may now name other bytes; whatever read_body returns hashes to its row.
    assert_consistent(obs)
    shutil.rmtree(directory)


# --- every field, every byte ----------------------------------------------------------------

def _quick(directory: Path, want_check: bool) -> tuple[set, set, bool | None]:
    """(kernel-verified keys, read_body-verified keys, check sound): the cheap read paths.
    ``check`` runs only when asked or when the kernel found nothing (is that silence right?)."""
    keys = {(r[1], r[2], r[3]) for r in index_rows(directory / "session.db")}
    sound = None
    try:
        _, findings = _verify.verify_ledger(str(directory / "session.db"), threads=1)
    except errors.BadFileHeader as e:
        assert e.path == directory / "session.bodies"
        findings, keys_bad = [], keys
    else:
        keys_bad = {(f.event_id, f.source_table, f.direction) for f in findings}
    good = set()
    try:
        with Ledger(directory) as ledger:
            for key in keys:
                try:
                    ledger.read_body(*key)
                    good.add(key)
                except errors.ArchiveError as e:
                    assert e.path == directory / "session.bodies"
    except errors.BadFileHeader as e:
        assert e.path == directory / "session.bodies"
    if want_check or not keys_bad:
        sound = check_ledger(directory / "session.db", verify_bodies=True).sound
        assert not (keys_bad and sound), "bodies fail to verify but check calls the ledger sound"
    return keys - keys_bad, good, sound


def test_every_segment_length_field_forged_up_to_2_32_minus_1_is_refused(pristine, work):
    """raw_start, raw_len and comp_len of the first and the last segment of each block, set to
    hostile values from 0 to 2^32-1: never a crash, never an allocation sized by the field,
    the same bodies fail in every reader, and check never calls the ledger sound."""
    source, committed = pristine
    data = (source / "session.bodies").read_bytes()
    tried = 0
    for block in layout(data):
        for seg in {s.at: s for s in (block.segments[0], block.segments[-1])}.values():
            for field_at in (8, 12, 16):
                old = struct.unpack_from("<I", data, seg.at + field_at)[0]
                for value in {0, 1, 65536, MAX_BLOCK_RAW, MAX_BLOCK_RAW + 1, 1 << 31, U32_MAX, old + 1,
                              (old - 1) & U32_MAX} - {old}:
                    forged = bytearray(data)
                    struct.pack_into("<I", forged, seg.at + field_at, value)
                    replace_bytes(work / "session.bodies", bytes(forged))
                    kernel, stream, sound = _quick(work, want_check=tried % 5 == 0)
                    assert kernel == stream, (seg.at, field_at, value)
                    assert sound is not True, f"segment {seg.at} field {field_at} = {value} went unreported"
                    tried += 1
    assert tried > 40


def test_any_changed_byte_of_a_small_archive_is_reported_or_changes_no_body(tmp_path):
    """Flip one bit of each byte of a small archive in turn: --verify-bodies reports it, or no
    body's bytes changed (every reader still returns every body intact). The bytes that may
    change silently are exactly those no body depends on: the file header's reserved bytes,
    the hash and payload of an empty FINAL segment, and the padding bits of a deflate
    stream's byte-aligning blocks."""
    source = tmp_path / "src"
    committed = {c.key for c in write_tiny(source)}
    data = (source / "session.bodies").read_bytes()
    may_be_silent = set(range(10, 16))
    for block in layout(data):
        for seg in block.segments:
            payload_end = seg.end
            if seg.final and seg.raw_len == 0:
                may_be_silent |= set(range(seg.at + 20, payload_end))
            elif seg.final:
                may_be_silent.add(payload_end - 1)
            else:
                may_be_silent.add(payload_end - 5)
    work = tmp_path / "work"
    copy_ledger_files(source, work)
    silent = set()
    for at in range(len(data)):
        flipped = bytearray(data)
        flipped[at] ^= 0x20
        replace_bytes(work / "session.bodies", bytes(flipped))
        kernel, stream, sound = _quick(work, want_check=at % 16 == 0)
        assert kernel == stream, at
        if sound:
            assert kernel == committed, at
            silent.add(at)
    assert silent <= may_be_silent, sorted(silent - may_be_silent)
    assert len(data) - len(silent) > 400


# --- decompression bombs and other crafted segments -------------------------------------------

def _segment(final: bool, raw_start: int, raw_len: int, payload: bytes, digest: bytes) -> bytes:
    return struct.pack("<4sB3sIII32s", b"SGMT", 1 if final else 0, b"\0\0\0", raw_start, raw_len, len(payload),
                       digest) + payload


def install_archive(directory: Path, codec: int, segments: bytes, raw_len: int, spans: list[tuple[int, int]],
                    body: bytes) -> None:
    """Replace the one-block ledger in ``directory`` by one crafted block at offset 16 whose
    index rows name ``spans`` (each row's hash is that of ``body``)."""
    archive = fmt.pack_file_header() + fmt.pack_block_header(codec) + segments
    replace_bytes(directory / "session.bodies", archive)
    digest = "blake3:" + blake3(body).hexdigest()
    statements: list = ["DELETE FROM event_body_blobs", "DELETE FROM body_blocks",
                        ("INSERT INTO body_blocks VALUES (16, ?, ?, '2026-11-30T12:00:00.000000Z')",
                         (raw_len, len(archive) - 16))]
    for i, (off, length) in enumerate(spans):
        statements.append((
            "INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
            "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
            "VALUES (?, 'http.request', 'net_events', 'request', ?, ?, 0, ?, 16, ?, ?, '2026-11-30T12:00:00Z')",
            (f"{i:012x}", length, length, digest, off, length)))
    sql(directory / "session.db", *statements)


def _deflate(data: bytes, final: bool) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


def _deflate_zeros(mib: int, final: bool) -> bytes:
    """Raw deflate of ``mib`` MiB of zeros, cheaply: once the window holds only zeros, each
    further MiB sync-flushed compresses to the same ~1 KiB, so it is repeated, not recomputed."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    mib_of_zeros = bytes(1 << 20)
    first = c.compress(mib_of_zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    repeat = c.compress(mib_of_zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    return first + repeat * (mib - 1) + (c.flush(zlib.Z_FINISH) if final else b"")


def _zstd(data: bytes, final: bool, window_log: int = 21) -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log, write_content_size=0,
                                                            write_checksum=0)
    c = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return c.compress(data) + c.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH if final
                                      else zstandard.COMPRESSOBJ_FLUSH_BLOCK)


BOMB_CASES = {
    # A 66 KiB deflate payload (the most comp_len allows for raw_len 1000) inflating to 64 MiB.
    "deflate_small_raw_len": lambda: (1, _segment(False, 0, 1000, _deflate_zeros(64, False),
                                                  blake3(bytes(1000)).digest()), 1000, [(0, 1000)], bytes(1000)),
    # raw_len forged to the 16 MiB ceiling; the payload inflates to 256 MiB.
    "deflate_raw_len_at_ceiling": lambda: (1, _segment(True, 0, 16 << 20, _deflate_zeros(256, True),
                                                       blake3(bytes(16 << 20)).digest()), 16 << 20,
                                           [(0, 100), ((16 << 20) - 100, 100)], bytes(100)),
    # A zstd frame of 512 MiB of zeros is a few KiB.
    "zstd_small_raw_len": lambda: (2, _segment(True, 0, 4096, _zstd(bytes(512 << 20), True),
                                               blake3(bytes(4096)).digest()), 4096, [(0, 4096)], bytes(4096)),
    "zstd_raw_len_at_ceiling": lambda: (2, _segment(True, 0, 16 << 20, _zstd(bytes(512 << 20), True),
                                                    blake3(bytes(16 << 20)).digest()), 16 << 20,
                                        [((16 << 20) - 10, 10)], bytes(10)),
    # A frame that asks for a 1 GiB window: refused, not allocated.
    "zstd_huge_window": lambda: (2, _segment(True, 0, 1 << 20, _zstd(os.urandom(1 << 20), True, window_log=30),
                                             blake3(b"").digest()), 1 << 20, [(0, 10)], bytes(10)),
}

_PROBE = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from tests import reliability_helpers as H
from pathlib import Path
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.ledger import Ledger
from capsem_core.errors import LedgerError

def run(d):
    out = {}
    try:
        with Ledger(d) as ledger:
            for event_id, table, direction in ledger._conn.execute(
                    "SELECT event_id, source_table, direction FROM event_body_blobs"):
                try:
                    ledger.read_body(event_id, table, direction)
                    out.setdefault("read_ok", 0); out["read_ok"] += 1
                except LedgerError as e:
                    out["read_error"] = type(e).__name__
            try:
                list(ledger.bodies())
            except LedgerError as e:
                out["bodies_error"] = type(e).__name__
    except LedgerError as e:
        out["open_error"] = type(e).__name__
    n, findings = _verify.verify_ledger(str(Path(d) / "session.db"), threads=2)
    out["verified"] = n
    out["findings"] = sorted({f.kind for f in findings})
    code, _, err = H.run_cli_check(Path(d) / "session.db")
    out["cli"] = code
    out["traceback"] = "Traceback" in err
    return out

def peak_kib():
    # VmHWM belongs to this process's memory map, new at exec; ru_maxrss survives exec and
    # could start at the (larger) parent's size, hiding any growth.
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

run(sys.argv[2])  # warm: every path touched once on a sound ledger
base = peak_kib()
results = {d: run(d) for d in sys.argv[3:]}
peak = peak_kib()
print(json.dumps({"base_kib": base, "peak_kib": peak, "results": results}))
"""


def test_decompression_bombs_fail_cleanly_within_the_block_memory_ceiling(tmp_path):
    dirs = []
    for name, make in BOMB_CASES.items():
        codec, segments, raw_len, spans, body = make()
        d = tmp_path / name
        write_fixture(d, count=1, random_bytes=False)
        install_archive(d, codec, segments, raw_len, spans, body)
        dirs.append(str(d))
    sound = tmp_path / "sound"
    write_fixture(sound, count=6)
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(TESTS.parent), str(sound), *dirs], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for d, result in report["results"].items():
        assert result["verified"] == 0 and result["findings"], (d, result)
        assert result["cli"] == 1 and not result["traceback"], (d, result)
        assert "read_ok" not in result, (d, result)
    # The readers hold at most one block's raw bytes (16 MiB) per cursor, plus the kernel's
    # whole-block buffers; an unbounded inflate would need 64 MiB to 512 MiB per case.
    grown_mib = (report["peak_kib"] - report["base_kib"]) / 1024
    print(f"\npeak RSS {report['peak_kib'] // 1024} MiB, grew {grown_mib:.1f} MiB over the bombs")
    if not os.environ.get("CAPSEM_SANITIZE"):   # ASan's shadow memory and quarantine inflate RSS
        assert grown_mib < 80, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_a_zero_length_non_final_segment_is_a_bad_segment(tmp_path):
    d = tmp_path / "l"
    write_fixture(d, count=1, random_bytes=False)
    body = b"hello body"
    segments = (_segment(False, 0, 0, b"\x00\x00\xff\xff", blake3(b"").digest())
                + _segment(True, 0, len(body), _deflate(body, True), blake3(body).digest()))
    install_archive(d, 1, segments, len(body), [(0, len(body))], body)
    with Ledger(d) as ledger, pytest.raises(errors.BadSegment) as info:
        ledger.read_body(f"{0:012x}", "net_events", "request")
    assert info.value.path == d / "session.bodies" and "bad segment at offset 24" in str(info.value)
    assert not check_ledger(d / "session.db", verify_bodies=True).sound


def test_a_block_without_final_reads_to_its_last_segment_and_a_new_writer_continues(tmp_path):
    """A writer that died before closing its block leaves no FINAL: every committed body
    still reads, check finds no damage, and the next writer starts a new block after it."""
    d = tmp_path / "l"
    committed = write_fixture(d, seed=2, count=10, keep_open=True)
    data = (d / "session.bodies").read_bytes()
    assert not layout(data)[-1].segments[-1].final
    obs = observe(d)
    assert_consistent(obs, {c.key: c.data for c in committed})
    assert obs.check_sound and len(obs.stream_good) == len(committed)
    with LedgerWriter(d) as writer:
        from capsem_core.writer import Body

        writer.insert("net_events", {"event_id": "ffffffffffff", "timestamp": "2026-11-30T12:00:00.000000Z",
                                     "domain": "x", "decision": "allowed"},
                      bodies=[Body("request", b"after the crash", "http.request")])
    with Ledger(d) as ledger:
        assert ledger.read_body("ffffffffffff", "net_events", "request") == b"after the crash"
        assert len(list(ledger.bodies())) == len(committed) + 1
    assert check_ledger(d / "session.db", verify_bodies=True).sound


def test_trailing_garbage_and_torn_tails_are_never_damage(pristine, work):
    source, committed = pristine
    data = (source / "session.bodies").read_bytes()
    rng = random.Random(11)
    for extra in (b"\0", rng.randbytes(4096), b"BLK2\x01\x00\x00\x00" + data[24:400], data[16:]):
        replace_bytes(work / "session.bodies", data + extra)
        obs = observe(work, run_cli=True)
        assert_consistent(obs, committed)
        assert obs.check_sound and obs.cli_exit == 0 and obs.stream_good == committed
