"""The native ArchiveReader: Capsem's cursor semantics, hostile headers, growing files."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import blake3
import numpy as np
import pytest

from capsem_core import errors
from capsem_core import format as fmt
from capsem_core._native import _archive
from capsem_core._native._archive import LIMITS, ArchiveReader
from capsem_core.writer import BodyArchiveWriter

CODECS = ["deflate", "zstd"]
SEG = fmt.SEGMENT_HEADER_BYTES


def _body(i: int, n: int) -> bytes:
    # Half text, half noise, so segments compress but not to nothing.
    text = (f"body {i} " * (n // 14 + 1)).encode()[: n // 2]
    return text + os.urandom(n - len(text))


def write_block(path: Path, sizes: list[int], *, codec: str = "deflate", close: bool = True,
                per_segment: int = 1) -> tuple[list[tuple[int, int, int]], list[bytes]]:
    """One block whose segments each carry `per_segment` bodies; returns refs and bodies."""
    w = BodyArchiveWriter(path, codec=codec)
    refs, bodies = [], []
    for i, n in enumerate(sizes):
        data = _body(i, n)
        refs.append(w.stage(data))
        bodies.append(data)
        if (i + 1) % per_segment == 0 and not (close and i == len(sizes) - 1):
            w.flush_segment()
    if close:
        w.close_block()
    else:
        w.flush_segment()
    w.sync()
    w.close()
    return refs, bodies


def segment_offsets(path: Path, block_offset: int = 16) -> list[int]:
    """File offsets of the segment headers of the block at block_offset (a test-side walk)."""
    data = path.read_bytes()
    at, out = block_offset + fmt.BLOCK_HEADER_BYTES, []
    while at + SEG <= len(data) and data[at:at + 4] == b"SGMT":
        out.append(at)
        comp_len = struct.unpack_from("<I", data, at + 16)[0]
        final = data[at + 4] & 1
        at += SEG + comp_len
        if final:
            break
    return out


def flip(path: Path, at: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


def vm_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return tmp_path / "session.bodies"


def test_native_limits_agree_with_the_format_module():
    assert LIMITS == {
        "file_header_bytes": fmt.FILE_HEADER_BYTES,
        "block_header_bytes": fmt.BLOCK_HEADER_BYTES,
        "segment_header_bytes": fmt.SEGMENT_HEADER_BYTES,
        "max_block_raw_bytes": fmt.MAX_BLOCK_RAW_BYTES,
        "max_segment_expansion": fmt.MAX_SEGMENT_EXPANSION,
    }


@pytest.mark.parametrize("codec", CODECS)
def test_forward_reads_cost_one_segment_each_and_rereads_are_free(archive, codec):
    refs, bodies = write_block(archive, [300, 5000, 120, 70000], codec=codec)
    r = ArchiveReader(archive)
    for k, (ref, data) in enumerate(zip(refs, bodies), start=1):
        assert r.read(*ref) == data
        assert (r.blocks_inflated, r.segments_inflated) == (1, k)
    for ref, data in zip(refs, bodies):
        assert r.read(*ref) == data
    assert (r.blocks_inflated, r.segments_inflated) == (1, 4)


@pytest.mark.parametrize("codec", CODECS)
def test_reading_the_last_body_first_inflates_every_segment_once(archive, codec):
    refs, bodies = write_block(archive, [200, 300, 400], codec=codec)
    r = ArchiveReader(archive)
    assert r.read(*refs[-1]) == bodies[-1]
    assert (r.blocks_inflated, r.segments_inflated) == (1, 3)
    for ref, data in zip(refs, bodies):
        assert r.read(*ref) == data
    assert (r.blocks_inflated, r.segments_inflated) == (1, 3)


def test_switching_blocks_restarts_the_cursor(archive):
    w = BodyArchiveWriter(archive)
    a = w.stage(b"A" * 100)
    w.close_block()
    b = w.stage(b"B" * 100)
    w.close_block()
    w.sync()
    w.close()
    r = ArchiveReader(archive)
    assert r.read(*a) == b"A" * 100
    assert r.read(*b) == b"B" * 100
    assert r.read(*a) == b"A" * 100
    assert r.blocks_inflated == 3


def test_a_span_past_an_open_block_is_truncated_then_out_of_range_once_closed(archive):
    w = BodyArchiveWriter(archive)
    good = w.stage(b"good" * 50)
    w.flush_segment()
    w.sync()
    r = ArchiveReader(archive)
    past = (good[0], good[1] + good[2], 10)
    with pytest.raises(errors.TruncatedBlock, match="is truncated: the file ends inside its payload") as exc:
        r.read(*past)
    assert exc.value.path == archive
    assert r.read(*good) == b"good" * 50  # nothing stale after the failed read
    w.close_block()
    w.sync()
    w.close()
    with pytest.raises(errors.RefOutOfRange, match="body reference out of range for its block"):
        r.read(*past)
    assert r.read(*good) == b"good" * 50


def test_the_largest_u32_span_is_out_of_range_before_any_io(archive):
    refs, _ = write_block(archive, [100])
    r = ArchiveReader(archive)
    with pytest.raises(errors.RefOutOfRange):
        r.read(refs[0][0], 2**32 - 1, 2**32 - 1)
    with pytest.raises(errors.RefOutOfRange):
        r.read(refs[0][0], 0, fmt.MAX_BLOCK_RAW_BYTES + 1)
    with pytest.raises(errors.RefOutOfRange):
        r.read(refs[0][0], -1, 5)
    assert r.blocks_inflated == 0


@pytest.mark.parametrize("offset", [16 + 3, 2**40, 2**64 - 1, 0, -1])
def test_an_offset_that_is_not_a_block_start_is_a_bad_block_header(archive, offset):
    write_block(archive, [100])
    r = ArchiveReader(archive)
    with pytest.raises(errors.BadBlockHeader, match="bad block header at offset"):
        r.read(offset, 0, 10)


def test_unknown_codec_and_nonzero_block_flags_are_unsupported(archive):
    refs, _ = write_block(archive, [100])
    data = bytearray(archive.read_bytes())
    data[16 + 4] = 3
    archive.write_bytes(bytes(data))
    with pytest.raises(errors.UnsupportedCodec, match="block at offset 16 uses unsupported codec 3"):
        ArchiveReader(archive).read(*refs[0])
    data[16 + 4] = 1
    data[16 + 5] = 0x80
    archive.write_bytes(bytes(data))
    with pytest.raises(errors.UnsupportedCodec):
        ArchiveReader(archive).read(*refs[0])


FIELDS = {"magic": 0, "flags": 4, "reserved": 6, "raw_start": 8, "raw_len": 13, "comp_len": 17,
          "hash": 40, "payload": SEG, "last": -1}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_flipping_one_byte_of_segment_k_breaks_exactly_the_bodies_needing_k_or_later(tmp_path, codec, field):
    for k in range(4):
        path = tmp_path / f"{k}.bodies"
        refs, bodies = write_block(path, [400, 900, 300, 600], codec=codec)
        segs = segment_offsets(path)
        ends = segs[1:] + [path.stat().st_size]
        at = ends[k] - 1 if field == "last" else segs[k] + FIELDS[field]
        flip(path, at, 0x10 if field == "raw_len" else 0x01)
        for shared in (True, False):
            r = ArchiveReader(path)
            for i, (ref, data) in enumerate(zip(refs, bodies)):
                if not shared:
                    r = ArchiveReader(path)
                if i < k:
                    assert r.read(*ref) == data
                else:
                    with pytest.raises(errors.ArchiveError):
                        r.read(*ref)


def test_a_zero_length_non_final_segment_and_a_missing_sync_tail_are_bad_segments(archive):
    refs, _ = write_block(archive, [100, 100])
    seg0 = segment_offsets(archive)[0]
    data = bytearray(archive.read_bytes())
    comp_len = struct.unpack_from("<I", data, seg0 + 16)[0]
    missing_tail = bytearray(data)
    missing_tail[seg0 + SEG + comp_len - 1] = 0xFE
    archive.write_bytes(bytes(missing_tail))
    with pytest.raises(errors.BadSegment, match=f"bad segment at offset {seg0}"):
        ArchiveReader(archive).read(*refs[0])
    empty = bytearray(data)
    struct.pack_into("<I", empty, seg0 + 12, 0)
    archive.write_bytes(bytes(empty))
    with pytest.raises(errors.BadSegment):
        ArchiveReader(archive).read(*refs[0])


def _hostile(path: Path, *, raw_start=0, raw_len=100, comp_len=None, flags=0, payload=None, codec=1) -> None:
    payload = payload if payload is not None else zlib.compressobj(6, zlib.DEFLATED, -15).compress(b"x" * 100)
    comp_len = len(payload) if comp_len is None else comp_len
    head = fmt.pack_file_header() + b"BLK2" + bytes([codec, 0, 0, 0])
    seg = struct.pack("<4sB3sIII32s", b"SGMT", flags, b"\0\0\0", raw_start, raw_len, comp_len, b"\0" * 32)
    path.write_bytes(head + seg + payload)


@pytest.mark.parametrize("fields, error", [
    (dict(raw_len=2**32 - 1), errors.BadSegment),
    (dict(raw_len=2**32 - 1, flags=1), errors.BadSegment),
    (dict(comp_len=2**32 - 1), errors.BadSegment),
    (dict(raw_len=fmt.MAX_BLOCK_RAW_BYTES, comp_len=2**32 - 1, flags=1), errors.BadSegment),
    (dict(raw_start=2**32 - 1), errors.BadSegment),
    (dict(raw_len=fmt.MAX_BLOCK_RAW_BYTES, comp_len=fmt.MAX_BLOCK_RAW_BYTES + 65536, flags=1), errors.TruncatedBlock),
    (dict(flags=0x02), errors.BadSegment),
    (dict(raw_len=0), errors.BadSegment),
    (dict(flags=1, payload=b"\xff" * 40), errors.InflateError),
    (dict(flags=1, codec=2, payload=b"\x28\xb5\x2f\xfd\x00\x58" + b"\0" * 20), errors.ArchiveError),
])
def test_hostile_segment_headers_are_refused_with_bounded_memory(archive, fields, error):
    _hostile(archive, **fields)
    r = ArchiveReader(archive)
    before = vm_rss_kib()
    for _ in range(20):
        with pytest.raises(error):
            r.read(16, 0, 100)
    assert vm_rss_kib() - before < 8 * 1024


def test_a_deflate_bomb_stops_one_byte_past_the_declared_length(archive):
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = bomb.compress(b"\0" * (64 << 20)) + bomb.flush()
    import blake3
    head = fmt.pack_file_header() + fmt.pack_block_header(1)
    assert len(payload) <= 1000 + fmt.MAX_SEGMENT_EXPANSION  # passes the header bounds
    seg = fmt.pack_segment_header(True, 0, 1000, len(payload), blake3.blake3(b"\0" * 1000).digest())
    archive.write_bytes(head + seg + payload)
    before = vm_rss_kib()
    with pytest.raises(errors.IntegrityError, match="inflates to more than 1000 bytes"):
        ArchiveReader(archive).read(16, 0, 10)
    assert vm_rss_kib() - before < 8 * 1024


@pytest.mark.parametrize("content, why", [
    (b"", "shorter than the 16-byte file header"),
    (b"CAPSEMBL\x02\x00", "shorter than the 16-byte file header"),
    (b"CAPSEMBX\x02\x00\x00\x00\x00\x00\x00\x00", "not a CAPSEMBL version 2 file"),
    (b"CAPSEMBL\x01\x00\x00\x00\x00\x00\x00\x00", "not a CAPSEMBL version 2 file"),
    (b"CAPSEMBL\x03\x00\x00\x00\x00\x00\x00\x00", "not a CAPSEMBL version 2 file"),
])
def test_a_foreign_short_or_other_version_header_is_refused_naming_the_file(archive, content, why):
    archive.write_bytes(content)
    with pytest.raises(errors.BadFileHeader, match=why) as exc:
        ArchiveReader(archive)
    assert str(archive) in str(exc.value)


def test_a_symlink_a_directory_and_a_missing_path_are_refused(tmp_path, archive):
    write_block(archive, [10])
    link = tmp_path / "link.bodies"
    link.symlink_to(archive)
    with pytest.raises(errors.SymlinkRefused, match="archive path is a symlink"):
        ArchiveReader(link)
    with pytest.raises(errors.ArchiveError, match="not a regular file"):
        ArchiveReader(tmp_path)
    with pytest.raises(errors.ArchiveError, match="io: No such file"):
        ArchiveReader(tmp_path / "missing.bodies")


def test_replacing_the_file_by_rename_is_noticed(tmp_path, archive):
    write_block(archive, [10])
    r = ArchiveReader(archive)
    assert not r.file_was_replaced()
    other = tmp_path / "other.bodies"
    write_block(other, [20])
    os.replace(other, archive)
    assert r.file_was_replaced()
    archive.unlink()
    assert r.file_was_replaced()


def test_read_verified_refuses_bytes_that_do_not_match_the_digest(archive):
    import blake3
    refs, bodies = write_block(archive, [100])
    r = ArchiveReader(archive)
    assert r.read_verified(*refs[0], blake3.blake3(bodies[0]).digest()) == bodies[0]
    with pytest.raises(errors.BodyHashMismatch, match="does not match the row that named it"):
        r.read_verified(*refs[0], bytes(32))


def test_read_verified_takes_the_row_s_body_hash_text_and_names_the_body(archive):
    import blake3
    refs, bodies = write_block(archive, [100, 50])
    r = ArchiveReader(archive)
    good = "blake3:" + blake3.blake3(bodies[0]).hexdigest()
    assert r.read_verified(*refs[0], good, "ev0") == bodies[0]
    got = "blake3:" + blake3.blake3(bodies[1]).hexdigest()
    with pytest.raises(errors.BodyHashMismatch) as wrong:
        r.read_verified(*refs[1], good, "ev1")
    assert wrong.value.detail == (f"archived body of ev1 does not match the row that named it: "
                                  f"index says {good}, bytes hash to {got}")
    assert wrong.value.path == archive
    # A malformed text (upper-case hex here) matches no bytes, and is quoted as the row has it.
    upper = "blake3:" + blake3.blake3(bodies[1]).hexdigest().upper()
    with pytest.raises(errors.BodyHashMismatch, match=f"index says {upper}, bytes hash to {got}"):
        r.read_verified(*refs[1], upper, "ev1")
    # Archive errors come before the hash: a span past the block is out of range.
    with pytest.raises(errors.RefOutOfRange):
        r.read_verified(refs[0][0], 0, 17 << 20, good)


def test_a_reader_follows_a_writer_appending_to_the_same_open_block(archive):
    w = BodyArchiveWriter(archive)
    w.sync()
    r = ArchiveReader(archive)
    for i in range(60):
        data = _body(i, 50 + i * 7)
        ref = w.stage(data)
        w.flush_segment()
        w.sync()
        assert r.read(*ref) == data
        assert (r.blocks_inflated, r.segments_inflated) == (1, i + 1)
        # The writer keeps going; the reader never needs the extra bytes.
        w.stage(b"unannounced")
    w.close_block()
    w.close()
    assert r.size == archive.stat().st_size


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_keeps_exactly_the_completely_written_bodies(tmp_path, codec):
    full = tmp_path / "full.bodies"
    w = BodyArchiveWriter(full, codec=codec)
    refs, bodies, written_to = [], [], []
    for i in range(4):
        data = (b"text %d " % i) * 40 if i % 2 == 0 else os.urandom(120)
        refs.append(w.stage(data))
        bodies.append(data)
        w.close_block() if i == 3 else w.flush_segment()
        written_to.append(w.end)
    w.sync()
    w.close()
    blob = full.read_bytes()
    cut = tmp_path / "cut.bodies"
    for length in range(16, len(blob) + 1):
        cut.write_bytes(blob[:length])
        shared = ArchiveReader(cut)
        for ref, data, end in zip(refs, bodies, written_to):
            for r in (shared, ArchiveReader(cut)):
                if end <= length:
                    assert r.read(*ref) == data
                else:
                    with pytest.raises(errors.ArchiveError):
                        r.read(*ref)


def test_walk_extent_reports_the_structure_without_inflating(archive):
    write_block(archive, [100, 200, 300])
    size = archive.stat().st_size
    r = ArchiveReader(archive)
    assert r.walk_extent(16, size - 16) == (1, 600, 3, True)
    assert r.segments_inflated == 0
    open_extent = segment_offsets(archive)[2] - 16
    assert r.walk_extent(16, open_extent) == (1, 300, 2, False)


def test_an_extent_off_a_segment_boundary_is_refused(archive):
    write_block(archive, [100, 200, 300])
    size = archive.stat().st_size
    disk_len = size - 16
    r = ArchiveReader(archive)
    for bad in (disk_len - 1, 3, 8, 8 + SEG, segment_offsets(archive)[1] - 16 + 1):
        with pytest.raises((errors.BadSegment, errors.TruncatedBlock)):
            r.walk_extent(16, bad)
    with pytest.raises((errors.BadSegment, errors.TruncatedBlock)):
        r.walk_extent(16, disk_len + 1)
    with pytest.raises(errors.BadBlockHeader):
        r.walk_extent(19, 100)
    with pytest.raises(errors.BadBlockHeader):
        r.walk_extent(size + 100, 100)


def test_walk_extents_finds_in_one_pass_what_walk_extent_finds_one_by_one(archive):
    write_block(archive, [100, 200, 300])
    size = archive.stat().st_size
    disk_len = size - 16
    open_extent = segment_offsets(archive)[2] - 16
    offsets = [16, 16, 16, 19, size + 100, -1, 16]
    lengths = [disk_len, open_extent, disk_len - 1, 100, 100, 10, -5]
    r = ArchiveReader(archive)
    walk = r.walk_extents(offsets, lengths)
    failed = dict(walk.failures)
    assert sorted(failed) == [2, 3, 4, 5, 6]
    for i, (off, length) in enumerate(zip(offsets, lengths)):
        if i in failed:
            with pytest.raises(type(failed[i])) as one:
                r.walk_extent(off, length)
            assert str(one.value) == str(failed[i])
            assert walk.raw_len[i] == walk.segments[i] == 0
        else:
            _, raw_len, segments, _ = r.walk_extent(off, length)
            assert (walk.raw_len[i], walk.segments[i]) == (raw_len, segments)
    # Only the sound extents' segments are kept: 3 + 2, in order, nothing inflated.
    assert walk.segment_count == 5
    assert list(walk.seg_first) == [0, 3, 5, 5, 5, 5, 5, 5]
    assert r.segments_inflated == 0


def test_the_kernel_reads_the_same_with_the_walks_segment_table_as_without(archive):
    refs, bodies = write_block(archive, [100, 200, 300])
    size = archive.stat().st_size
    blocks = {"block_offset": np.array([16]), "disk_len": np.array([size - 16])}
    index = {"block_offset": np.array([r[0] for r in refs]), "body_offset": np.array([r[1] for r in refs]),
             "body_len": np.array([r[2] for r in refs]),
             "digest": np.array([list(blake3.blake3(b).digest()) for b in bodies], dtype=np.uint8),
             "hash_ok": np.ones(len(refs), dtype=np.uint8)}
    with ArchiveReader(archive) as r:
        walk = r.walk_extents(blocks["block_offset"], blocks["disk_len"])
        with_walk = _archive.verify_bodies_with(r, blocks, index, walk=walk)
        without = _archive.verify_bodies_with(r, blocks, index)
    assert not with_walk.status.any() and not without.status.any()
    # Damage after the walk is still caught: the table gives headers, never the bytes.
    data = bytearray(archive.read_bytes())
    data[segment_offsets(archive)[1] + SEG] ^= 0xFF
    archive.write_bytes(bytes(data))
    with ArchiveReader(archive) as r:
        walk = r.walk_extents(blocks["block_offset"], blocks["disk_len"])
        assert not walk.failures
        damaged = _archive.verify_bodies_with(r, blocks, index, walk=walk)
        plain = _archive.verify_bodies_with(r, blocks, index)
    assert damaged.status.any()
    assert (damaged.status == plain.status).all()


def test_a_segment_after_the_final_one_is_refused_by_the_walk(archive):
    write_block(archive, [100])
    final_only = archive.read_bytes()
    import blake3
    stray = fmt.pack_segment_header(True, 100, 0, 2, blake3.blake3(b"").digest()) + b"\x03\x00"
    archive.write_bytes(final_only + stray)
    with pytest.raises(errors.BadSegment, match="follows the FINAL one"):
        ArchiveReader(archive).walk_extent(16, len(final_only) - 16 + len(stray))


def test_one_reader_is_not_shared_between_threads_it_is_closed_cleanly(archive):
    refs, bodies = write_block(archive, [10])
    with ArchiveReader(archive) as r:
        assert r.read(*refs[0]) == bodies[0]
    with pytest.raises(ValueError, match="closed"):
        r.read(*refs[0])


_SHRINK_SCRIPT = r"""
import os, sys, threading, random
from pathlib import Path
from capsem_core import errors
from capsem_core import format as fmt
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.writer import Body, LedgerWriter

root = Path(sys.argv[1])
ledger = root / "ledger"
with LedgerWriter(ledger) as w:
    for i in range(48):
        w.insert("net_events", {"event_id": f"{i:012x}", "timestamp": "2026-11-30T12:00:00.000000Z",
                                "domain": "example.com", "decision": "allowed"},
                 bodies=[Body("request", random.Random(i).randbytes(160_000), "http.request")])
        if i % 6 == 5:
            w.flush()
bodies = ledger / "session.bodies"
pristine = bodies.read_bytes()

# The reader: mapped, then the file is cut to its header under it.
reader = _archive.ArchiveReader(str(bodies))
os.truncate(bodies, 16)
for call in (lambda: reader.read(16, 0, 100), lambda: reader.walk_extent(16, 1000)):
    try:
        call()
        raise SystemExit("a read past the new end of the file returned bytes")
    except errors.ArchiveError as exc:
        assert str(bodies) in str(exc), exc
reader.close()

# The kernel: cut the file at a random moment while the workers read it.
rng = random.Random(7)
truncated_findings = 0
for attempt in range(12):
    bodies.write_bytes(pristine)
    result = {}
    t = threading.Thread(target=lambda: result.update(out=_verify.verify_ledger(
        str(ledger / "session.db"), threads=2, use_libdeflate=bool(attempt % 2))))
    t.start()
    threading.Event().wait(rng.uniform(0, 0.02))
    os.truncate(bodies, rng.randrange(16, len(pristine)))
    t.join()
    verified, findings = result["out"]
    truncated_findings += len(findings)
print("ok", truncated_findings)
"""


def test_a_file_cut_short_under_the_map_is_a_clear_error_not_a_crash(tmp_path):
    """A session.bodies truncated after it was mapped raises SIGBUS on the next touch of a page
    past its new end; the reader, walk_extent and the verify kernel must report it instead."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _SHRINK_SCRIPT, str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    assert run.stdout.startswith("ok")


_FOREIGN_SEGFAULT = """
import ctypes, ctypes.util, signal
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

def handler(sig):
    # struct sigaction begins with its handler (glibc and macOS alike); 0 is SIG_DFL.
    old = ctypes.create_string_buffer(512)
    assert libc.sigaction(int(sig), None, old) == 0
    return ctypes.c_void_p.from_buffer(old).value or 0

before = handler(signal.SIGSEGV), handler(signal.SIGBUS)
import capsem_core._native._archive
after = handler(signal.SIGSEGV), handler(signal.SIGBUS)
print("handlers", before == (0, 0), after[0] != 0 and after[0] == after[1], flush=True)
ctypes.string_at(1, 1)  # a wild read, far from any map: a bug, which must still crash
print("survived", flush=True)
"""


@pytest.mark.skipif(bool(os.environ.get("CAPSEM_SANITIZE")),
                    reason="under scripts/sanitize ASan owns SIGSEGV, and the deliberate crash is its report")
@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_segfault_that_is_no_read_of_the_map_still_kills_the_process(faulthandler: bool) -> None:
    """The guard takes SIGSEGV too (macOS may raise it for a shrunken map), but only inside the
    map it guards: any other segfault still ends the process, through the handler before ours."""
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    flags = ["-X", "faulthandler"] if faulthandler else []
    run = subprocess.run([sys.executable, *flags, "-c", _FOREIGN_SEGFAULT], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stdout, run.stderr[-2000:])
    assert "survived" not in run.stdout
    if faulthandler:
        assert "Segmentation fault" in run.stderr  # the earlier handler ran
    else:
        # Both signals went from the default to the guard's one handler when _archive loaded.
        assert run.stdout.startswith("handlers True True"), run.stdout
