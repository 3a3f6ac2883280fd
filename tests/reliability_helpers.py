"""Shared pieces of the reliability suite: fixture ledgers built from real sample bodies, a map
of an archive's blocks and segments, the hostile mutations the fuzzers apply, and ``observe``,
which runs every read path over one ledger and checks what they may and may not say.

The same functions drive the quick CI campaigns (tests/test_reliability_*.py) and the long
ones (scripts/soak), so a soak exercises exactly what CI does, only more of it.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import sqlite3
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from oracles import archive_reader as oracle
from blake3 import blake3

from capsem_core import cli
from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.check import check_ledger
from capsem_core.errors import LedgerError
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

MAX_BLOCK_RAW = 16 << 20
U32_MAX = (1 << 32) - 1
TIMESTAMP = "2026-11-30T12:00:00.000000Z"
# Header fields forged to the values a hostile file is likely to hold.
FORGED_U32 = (0, 1, 2, 51, 52, 53, 65535, 65536, 65537, MAX_BLOCK_RAW - 1, MAX_BLOCK_RAW, MAX_BLOCK_RAW + 1,
              1 << 31, U32_MAX - 1, U32_MAX)


# --- fixture ledgers -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Committed:
    """One body a writer committed: the key of its index row and its bytes."""

    event_id: str
    source_table: str
    direction: str
    data: bytes

    @property
    def key(self) -> tuple[str, str, str]:
        return self.event_id, self.source_table, self.direction


_SAMPLE_BODIES: list[bytes] = []


def sample_bodies() -> list[bytes]:
    """Real bodies (SSE streams, JSON requests, tool output) from one small sample ledger."""
    if not _SAMPLE_BODIES:
        from capsem_core.sample import write_sample_ledger

        with tempfile.TemporaryDirectory(prefix="capsem-rel-sample-") as tmp:
            write_sample_ledger(Path(tmp) / "s", seed=7, mix="realistic", bodies=90)
            with Ledger(Path(tmp) / "s") as ledger:
                _SAMPLE_BODIES.extend(b.data for b in ledger.bodies())
    return _SAMPLE_BODIES


def event_id(n: int) -> str:
    return f"{n:012x}"


def net_row(eid: str) -> dict[str, object]:
    return {"event_id": eid, "timestamp": TIMESTAMP, "domain": "api.anthropic.com", "decision": "allowed"}


def write_fixture(directory: Path, *, codec: str = "deflate", seed: int = 0, count: int = 36,
                  flush_every: int = 3, close_chance: float = 0.4, random_bytes: bool = True,
                  keep_open: bool = False) -> list[Committed]:
    """A ledger of ``count`` net_events with request/response bodies taken from a real sample,
    cut into many segments (a flush every ``flush_every`` events) and many blocks (each flush
    closes its block with probability ``close_chance``: the writer's clock jumps past the
    one-hour block age). Some bodies are incompressible and some repeat (in-block and
    cross-block deduplication share spans). With ``keep_open`` the last block is left without
    its FINAL segment, as a crashed writer leaves it."""
    r = random.Random(seed)
    pool = sample_bodies()
    committed: list[Committed] = []
    now = [1_790_000_000.0]
    writer = LedgerWriter(directory, codec=codec, clock=lambda: now[0])
    for i in range(count):
        eid = event_id(i)
        request = pool[r.randrange(len(pool))]
        response = r.randbytes(r.randrange(1, 900)) if random_bytes and r.random() < 0.3 else pool[r.randrange(len(pool))]
        bodies = [Body("request", request, "http.request"), Body("response", response, "http.request")]
        writer.insert("net_events", net_row(eid), bodies=bodies)
        committed += [Committed(eid, "net_events", b.direction, bytes(b.data)) for b in bodies]
        now[0] += 0.25
        if (i + 1) % flush_every == 0:
            if r.random() < close_chance:
                now[0] += 3601  # the open block is now stale: this flush closes it
            writer.flush()
    writer.flush()
    if keep_open:
        # Release the files as a killed writer would: the open block keeps no FINAL segment.
        writer.archive.close()  # simulating a crash, not an API use
        writer._conn.close()  # noqa: SLF001
        writer._lock.release()  # noqa: SLF001  (the kernel drops a dead writer's flocks)
        writer._closed = True  # noqa: SLF001
    else:
        writer.close()
    return committed


TINY_BODIES = (b'{"model":"claude","messages":[{"role":"user","content":"hi"}]}',
               b'event: message_start\ndata: {"type":"message_start"}\n\n',
               b"\x00\x01binary\xff" * 3,
               b'{"model":"claude","messages":[{"role":"user","content":"hi"}]}')


def write_tiny(directory: Path) -> list[Committed]:
    """A ~480-byte archive small enough to damage byte by byte: a block closed by a FINAL
    segment carrying a body, then a block of two segments closed by an empty FINAL."""
    now = [1_790_000_000.0]
    with LedgerWriter(directory, clock=lambda: now[0]) as writer:
        for i, body in enumerate(TINY_BODIES):
            writer.insert("net_events", net_row(event_id(i)), bodies=[Body("request", body, "http.request")])
            if i == 1:
                now[0] += 3601
            writer.flush()
    return [Committed(event_id(i), "net_events", "request", b) for i, b in enumerate(TINY_BODIES)]


def copy_ledger_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("session.db", "session.bodies"):
        shutil.copyfile(src / name, dst / name)


def replace_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file renamed over ``path``: a reader that still maps the old
    file keeps its pages (truncating a mapped file in place would fault it)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def sql(db: Path, *statements: tuple[str, tuple] | str) -> None:
    """Run statements on ``db`` with its CHECK constraints off: a hostile file need not obey them."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("PRAGMA foreign_keys = OFF")
        for s in statements:
            if isinstance(s, tuple):
                conn.execute(*s)
            else:
                conn.execute(s)
    finally:
        conn.close()


def index_rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, event_id, source_table, direction, block_offset, body_offset, body_len, "
                            "body_hash FROM event_body_blobs ORDER BY id").fetchall()
    finally:
        conn.close()


def block_rows(db: Path) -> list[tuple[int, int, int]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset").fetchall()
    finally:
        conn.close()


# --- the archive's structure -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Block:
    offset: int
    end: int
    segments: tuple[oracle.Segment, ...]


def layout(data: bytes) -> list[Block]:
    """The blocks of a well-formed archive, walked from offset 16 (blocks are contiguous)."""
    blocks: list[Block] = []
    at = 16
    while at + 8 <= len(data) and data[at:at + 4] == b"BLK2":
        segments = oracle.walk_block(data, at)
        if not segments:
            break
        blocks.append(Block(at, segments[-1].end, tuple(segments)))
        at = segments[-1].end
    return blocks


# --- hostile mutations of session.bodies ------------------------------------------------------

ARCHIVE_MUTATIONS = ("flip", "flip_header", "truncate", "insert", "delete", "swap_segments", "swap_blocks",
                     "duplicate_segment", "duplicate_block", "forge_field", "forge_flags", "forge_block_header",
                     "forge_file_header", "empty_nonfinal", "drop_final", "trailing_garbage", "torn_tail")


@dataclass(frozen=True, slots=True)
class Mutation:
    kind: str
    detail: str
    data: bytes
    # True when the mutation leaves every committed byte as it was (only bytes no extent
    # covers changed): readers must then report no damage at all.
    harmless: bool = False


def _segment_ranges(blocks: list[Block]) -> list[tuple[int, int]]:
    return [(s.at, s.end) for b in blocks for s in b.segments]


def _splice(data: bytes, at: int, remove: int, insert: bytes) -> bytes:
    return data[:at] + insert + data[at + remove:]


def _pick_segment(rng: random.Random, blocks: list[Block]) -> oracle.Segment:
    return rng.choice([s for b in blocks for s in b.segments])


def mutate_archive(rng: random.Random, data: bytes, kind: str | None = None) -> Mutation:
    """One hostile change of a well-formed archive ``data``, chosen by ``rng``."""
    blocks = layout(data)
    kind = kind or rng.choice(ARCHIVE_MUTATIONS)
    n = len(data)
    committed_end = blocks[-1].end if blocks else 16
    if kind == "flip":
        at = rng.randrange(n)
        mask = rng.randrange(1, 256)
        return Mutation(kind, f"byte {at} ^= {mask:#x}", _splice(data, at, 1, bytes([data[at] ^ mask])))
    if kind == "flip_header":
        # A header byte (block or segment) rather than anywhere: the bounds are what is tested.
        seg = _pick_segment(rng, blocks)
        at = seg.at + rng.randrange(52)
        mask = 1 << rng.randrange(8)
        return Mutation(kind, f"segment {seg.at} header byte {at} ^= {mask:#x}",
                        _splice(data, at, 1, bytes([data[at] ^ mask])))
    if kind == "truncate":
        cut = rng.randrange(n)
        return Mutation(kind, f"cut at {cut} of {n}", data[:cut])
    if kind == "insert":
        at = rng.randrange(n + 1)
        extra = rng.randbytes(rng.choice((1, 2, 3, 4, 52, rng.randrange(1, 300))))
        return Mutation(kind, f"{len(extra)} bytes inserted at {at}", _splice(data, at, 0, extra))
    if kind == "delete":
        at = rng.randrange(n)
        size = min(n - at, rng.choice((1, 2, 4, 52, rng.randrange(1, 500))))
        return Mutation(kind, f"{size} bytes deleted at {at}", _splice(data, at, size, b""))
    if kind in ("swap_segments", "swap_blocks"):
        ranges = _segment_ranges(blocks) if kind == "swap_segments" else [(b.offset, b.end) for b in blocks]
        if len(ranges) < 2:
            return mutate_archive(rng, data, "flip")
        (a0, a1), (b0, b1) = sorted(rng.sample(ranges, 2))
        out = data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]
        return Mutation(kind, f"[{a0},{a1}) <-> [{b0},{b1})", out)
    if kind in ("duplicate_segment", "duplicate_block"):
        ranges = _segment_ranges(blocks) if kind == "duplicate_segment" else [(b.offset, b.end) for b in blocks]
        a0, a1 = rng.choice(ranges)
        return Mutation(kind, f"[{a0},{a1}) repeated after itself", _splice(data, a1, 0, data[a0:a1]))
    if kind == "forge_field":
        seg = _pick_segment(rng, blocks)
        field_at, name = rng.choice(((8, "raw_start"), (12, "raw_len"), (16, "comp_len")))
        old = struct.unpack_from("<I", data, seg.at + field_at)[0]
        value = rng.choice(FORGED_U32 + ((old + 1) & U32_MAX, (old - 1) & U32_MAX, rng.randrange(U32_MAX + 1)))
        out = bytearray(data)
        struct.pack_into("<I", out, seg.at + field_at, value)
        return Mutation(kind, f"segment {seg.at} {name} {old} -> {value}", bytes(out))
    if kind == "forge_flags":
        seg = _pick_segment(rng, blocks)
        at = seg.at + rng.randrange(4, 8)
        value = rng.choice((0, 1, 2, 0x80, 0xFF, rng.randrange(256)))
        return Mutation(kind, f"segment {seg.at} byte {at} = {value:#x}", _splice(data, at, 1, bytes([value])))
    if kind == "forge_block_header":
        block = rng.choice(blocks)
        at = block.offset + rng.randrange(8)
        value = rng.choice((0, 1, 2, 3, 0xFF, rng.randrange(256)))
        return Mutation(kind, f"block {block.offset} byte {at} = {value:#x}", _splice(data, at, 1, bytes([value])))
    if kind == "forge_file_header":
        at = rng.randrange(16)
        value = rng.randrange(256)
        # Bytes 10-15 are reserved and never checked: changing them must change nothing.
        return Mutation(kind, f"file header byte {at} = {value:#x}", _splice(data, at, 1, bytes([value])),
                        harmless=at >= 10)
    if kind == "empty_nonfinal":
        # A zero-length non-final segment spliced in before a chosen segment of its block.
        block = rng.choice(blocks)
        k = rng.randrange(len(block.segments))
        seg = block.segments[k]
        empty = struct.pack("<4sB3sIII32s", b"SGMT", 0, b"\0\0\0", seg.raw_start, 0, 4, blake3(b"").digest())
        return Mutation(kind, f"empty non-final segment before {seg.at}",
                        _splice(data, seg.at, 0, empty + b"\x00\x00\xff\xff"))
    if kind == "drop_final":
        closed = [b for b in blocks if b.segments[-1].final]
        if not closed:
            return mutate_archive(rng, data, "truncate")
        block = rng.choice(closed)
        last = block.segments[-1]
        return Mutation(kind, f"FINAL segment {last.at} of block {block.offset} removed",
                        _splice(data, last.at, last.end - last.at, b""))
    if kind == "trailing_garbage":
        extra = rng.choice((rng.randbytes(rng.randrange(1, 400)),
                            b"BLK2\x01\x00\x00\x00" + rng.randbytes(rng.randrange(0, 200)),
                            data[16:min(n, 16 + rng.randrange(1, 2000))]))
        return Mutation(kind, f"{len(extra)} bytes appended", data + extra, harmless=True)
    if kind == "torn_tail":
        # What a crash leaves: part of a segment after the committed end, never indexed.
        tail = data[16:min(n, 16 + rng.randrange(1, 4000))]
        cut = rng.randrange(len(tail) + 1)
        return Mutation(kind, f"{cut}-byte torn tail after {committed_end}",
                        data[:committed_end] + tail[:cut] + data[committed_end:], harmless=committed_end == n)
    raise ValueError(kind)


# --- hostile rows in the body index -----------------------------------------------------------

INDEX_MUTATIONS = ("span", "block_offset", "body_hash", "duplicate_row", "contradictory_row", "block_row",
                   "drop_block_row", "overlapping_block", "swap_spans")
# Values an index column may be forged to (ints only: see test_reliability_fuzz for text values).
FORGED_INTS = (-(1 << 63), -1, 0, 1, 15, 16, 17, 8 + 52, MAX_BLOCK_RAW - 1, MAX_BLOCK_RAW, MAX_BLOCK_RAW + 1,
               U32_MAX, 1 << 32, 1 << 40, (1 << 62) + 1, (1 << 63) - 1)


def mutate_index(rng: random.Random, db: Path) -> str:
    """Apply one hostile change to the body index of ``db``; returns what it did."""
    rows = index_rows(db)
    blocks = block_rows(db)
    kind = rng.choice(INDEX_MUTATIONS if blocks else ("span", "block_offset", "body_hash", "duplicate_row",
                                                      "contradictory_row", "swap_spans"))
    rid, eid, table, direction, blk, off, length, body_hash = rng.choice(rows)

    def value(old: int) -> int:
        return rng.choice(FORGED_INTS + (old + 1, old - 1, rng.randrange(-(1 << 63), 1 << 63)))

    if kind == "span":
        column = rng.choice(("body_offset", "body_len"))
        v = value(off if column == "body_offset" else length)
        extra = ", stored_bytes = ?" if column == "body_len" else ""
        params = (v, v, rid) if extra else (v, rid)
        sql(db, (f"UPDATE event_body_blobs SET {column} = ?{extra} WHERE id = ?", params))
        return f"row {rid} {column} -> {v}"
    if kind == "block_offset":
        v = rng.choice([b[0] for b in blocks] + [value(blk)])
        sql(db, ("UPDATE event_body_blobs SET block_offset = ? WHERE id = ?", (v, rid)))
        return f"row {rid} block_offset {blk} -> {v}"
    if kind == "body_hash":
        forged = rng.choice(("blake3:" + "0" * 64, body_hash.upper(), body_hash[:-1], body_hash + "0",
                             "sha256:" + body_hash[7:], "", "blake3:" + blake3(rng.randbytes(8)).hexdigest()))
        sql(db, ("UPDATE event_body_blobs SET body_hash = ? WHERE id = ?", (forged, rid)))
        return f"row {rid} body_hash -> {forged!r}"
    if kind in ("duplicate_row", "contradictory_row"):
        # Another row naming the same span: with the same hash it is deduplication (legal);
        # with another hash it contradicts the bytes.
        new_hash = body_hash if kind == "duplicate_row" else "blake3:" + blake3(rng.randbytes(8)).hexdigest()
        sql(db, ("INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
                 "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
                 "VALUES (?, 'http.request', 'net_events', 'request', ?, ?, 0, ?, ?, ?, ?, ?)",
                 (f"f{rng.randrange(1 << 40):011x}", length, length, new_hash, blk, off, length, TIMESTAMP)))
        return f"{kind} of row {rid} with hash {new_hash}"
    if kind == "block_row":
        b = rng.choice(blocks)
        column = rng.choice(("raw_len", "disk_len"))
        old = b[1] if column == "raw_len" else b[2]
        v = value(old)
        sql(db, (f"UPDATE body_blocks SET {column} = ? WHERE block_offset = ?", (v, b[0])))
        return f"block {b[0]} {column} {old} -> {v}"
    if kind == "drop_block_row":
        b = rng.choice(blocks)
        sql(db, ("DELETE FROM body_blocks WHERE block_offset = ?", (b[0],)))
        return f"block row {b[0]} deleted"
    if kind == "overlapping_block":
        b = rng.choice(blocks)
        start = b[0] + rng.choice((1, 3, 8, b[2] - 1, b[2] // 2))
        sql(db, ("INSERT OR IGNORE INTO body_blocks (block_offset, raw_len, disk_len, sealed_at) VALUES (?, ?, ?, ?)",
                 (start, b[1], b[2], TIMESTAMP)))
        return f"block row at {start} overlapping block {b[0]}"
    if kind == "swap_spans":
        other = rng.choice(rows)
        sql(db, ("UPDATE event_body_blobs SET block_offset = ?, body_offset = ?, body_len = ?, stored_bytes = ? "
                 "WHERE id = ?", (other[4], other[5], other[6], other[6], rid)))
        return f"row {rid} given the span of row {other[0]}"
    raise ValueError(kind)


# --- running every read path ------------------------------------------------------------------

@dataclass
class Observation:
    """What each read path made of one ledger. Keys are (event_id, source_table, direction)."""

    opened: bool = False
    open_error: str | None = None
    stream_good: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    kernel_good: set[tuple[str, str, str]] = field(default_factory=set)
    oracle_good: set[tuple[str, str, str]] = field(default_factory=set)
    kernel_findings: int = 0
    check_sound: bool | None = None
    check_error: str | None = None
    cli_exit: int | None = None


def _assert_names_file(error: LedgerError, directory: Path) -> None:
    assert error.path is not None, f"error without a file: {error!r}"
    assert error.path.parent.resolve() == directory.resolve(), f"error names {error.path}, outside {directory}"
    assert str(error.path) in str(error), f"message does not name the file: {error}"


def run_cli_check(db: Path) -> tuple[int, str, str]:
    """``capsem-ledger check --db DB --verify-bodies --json`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", "--db", str(db), "--verify-bodies", "--json"])
    return code, out.getvalue(), err.getvalue()


def observe(directory: Path, *, run_cli: bool = True, threads: int = 2) -> Observation:
    """Every read path over the ledger in ``directory``. Each must end in a verdict or a
    LedgerError naming a file of the ledger; anything else (another exception, a crash)
    fails the caller."""
    db = directory / "session.db"
    obs = Observation()
    rows = index_rows(db)
    keys = {(r[1], r[2], r[3]): r for r in rows}

    # The reader API: read_body per row, then bodies() in archive order.
    try:
        ledger = Ledger(directory)
    except LedgerError as e:
        _assert_names_file(e, directory)
        obs.open_error = str(e)
    else:
        obs.opened = True
        with ledger:
            for key in keys:
                try:
                    obs.stream_good[key] = ledger.read_body(*key)
                except LedgerError as e:
                    _assert_names_file(e, directory)
            try:
                for record in ledger.bodies():
                    key = (record.event_id, record.source_table, record.direction)
                    assert obs.stream_good.get(key) == record.data, f"bodies() and read_body() disagree on {key}"
            except LedgerError as e:
                _assert_names_file(e, directory)

    # The native kernel.
    try:
        _, findings = _verify.verify_ledger(str(db), threads=threads)
    except LedgerError as e:
        _assert_names_file(e, directory)
    else:
        bad = {(f.event_id, f.source_table, f.direction) for f in findings}
        obs.kernel_findings = len(findings)
        obs.kernel_good = set(keys) - bad

    # The independent oracle (archive order, one cursor, as Capsem reads).
    try:
        reader = oracle.ArchiveOracle(directory / "session.bodies")
    except oracle.OracleError:
        pass
    else:
        for key, r in sorted(keys.items(), key=lambda kv: (kv[1][4], kv[1][5])):
            try:
                data = reader.read(r[4], r[5], r[6])
            except (oracle.OracleError, OverflowError, MemoryError):
                continue
            if "blake3:" + blake3(data).hexdigest() == r[7]:
                obs.oracle_good.add(key)

    # The doctor, as a library and as the command.
    try:
        report = check_ledger(db, verify_bodies=True)
    except LedgerError as e:
        _assert_names_file(e, directory)
        obs.check_error = str(e)
    else:
        obs.check_sound = report.sound
    if run_cli:
        code, _, err = run_cli_check(db)
        assert code in (0, 1), f"check exited {code}: {err}"
        assert "Traceback" not in err, err
        obs.cli_exit = code
    return obs


def assert_consistent(obs: Observation, committed: dict[tuple[str, str, str], bytes] | None = None) -> None:
    """What every read path must agree on, whatever was done to the ledger.

    * a body any path returns as good hashes to its row (read_body checked it) and, when the
      committed bytes are known, equals them: changed bytes are never returned as good;
    * the kernel, the streaming reader and the oracle verify exactly the same bodies;
    * a ledger with any body that does not verify is not sound (check exits 1), and a sound
      one verifies every body.
    """
    if committed is not None:
        for key, data in obs.stream_good.items():
            if key in committed:
                assert data == committed[key], f"read_body returned changed bytes for {key} as good"
    if obs.opened:
        stream = set(obs.stream_good)
        assert obs.kernel_good == stream, (f"kernel and read_body disagree: kernel only {obs.kernel_good - stream}, "
                                           f"read_body only {stream - obs.kernel_good}")
        assert obs.oracle_good == stream, (f"oracle and read_body disagree: oracle only {obs.oracle_good - stream}, "
                                           f"read_body only {stream - obs.oracle_good}")
    if obs.check_sound:
        assert obs.opened and obs.kernel_findings == 0, "check calls a ledger sound whose bodies do not all verify"
    if obs.kernel_findings:
        assert obs.check_sound is not True, "bodies fail to verify but check calls the ledger sound"
    if obs.cli_exit is not None and obs.check_sound is not None:
        assert obs.cli_exit == (0 if obs.check_sound else 1)


# --- directories and processes ----------------------------------------------------------------

def tree_snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """(mode, size, mtime_ns, content hash) of everything under ``root``, links not followed."""
    snap: dict[str, tuple[int, int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            digest = b""
            if os.path.isfile(p) and not os.path.islink(p):
                try:
                    digest = blake3(p.read_bytes()).digest()
                except PermissionError:
                    digest = b"?"
            snap[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    snap["."] = (os.lstat(root).st_mode, 0, os.lstat(root).st_mtime_ns, b"")
    return snap


def peak_rss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
