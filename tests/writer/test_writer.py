"""Behaviour of the ledger writer: rows and bodies through the flush cycle, blocks and the body
index, the pair's lock, links, schema and extents.

Every archive written here is read back with ``oracles/archive_reader.py``, an independent
pure-Python reader, never with the writer's own code.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from blake3 import blake3
from tests.writer.helpers import CODECS, MIB, T0, Clock, eid, net_row, query, text_bytes

from oracles import archive_reader as oracle
from capsem_core import format as fmt
from capsem_core.errors import LedgerError, RowRejected, SchemaMismatch, SymlinkRefused, WriterBusy
from capsem_core.writer import Body, LedgerWriter, ledger_timestamp


# --- the ledger writer --------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_rows_and_bodies_round_trip_through_the_index(tmp_path, codec):
    rng = random.Random(1)
    clock = Clock()
    bodies = {
        "random": rng.randbytes(5000),
        "text": text_bytes(rng, 9000),
        "one_mib": rng.randbytes(MIB),
    }
    with LedgerWriter(tmp_path, codec=codec, clock=clock) as w:
        for i, (name, data) in enumerate(bodies.items()):
            w.insert("net_events", net_row(i), [Body("request", data, "http.request", "application/octet-stream"),
                                                Body("response", name.encode(), "http.request")])
            clock.now += 1.5
        w.insert("net_events", net_row(9), [Body("request", b"", "http.request")])
    db = tmp_path / "session.db"
    got = {(b.event_id, b.direction): b.data for b in oracle.archived_bodies(db)}
    for i, (name, data) in enumerate(bodies.items()):
        assert got[(eid(i), "request")] == data
        assert got[(eid(i), "response")] == name.encode()
    assert (eid(9), "request") not in got  # empty bodies are not archived
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(4,)]
    row = query(db, "SELECT event_type, content_type, original_bytes, stored_bytes, truncated, body_hash, trace_id, "
                    "turn_id, created_at FROM event_body_blobs WHERE event_id = ? AND direction = 'request'",
                (eid(1),))[0]
    assert row == ("http.request", "application/octet-stream", 9000, 9000, 0,
                   "blake3:" + blake3(bodies["text"]).hexdigest(), "trace-0", "turn-0", "2025-06-15T15:06:41.500000Z")
    oracle.check_index_extents(db)


@pytest.mark.parametrize("codec", CODECS)
def test_a_body_over_10_mib_is_cut_and_marked_truncated(tmp_path, codec):
    big = random.Random(3).randbytes(10 * MIB + 123)
    with LedgerWriter(tmp_path, codec=codec) as w:
        w.insert("net_events", net_row(1), [Body("response", big, "http.request", original_bytes=5)])
        w.insert("net_events", net_row(2), [Body("response", b"short", "http.request", original_bytes=900)])
        w.insert("net_events", net_row(3), [Body("response", b"exact", "http.request", original_bytes=2)])
    db = tmp_path / "session.db"
    rows = query(db, "SELECT event_id, original_bytes, stored_bytes, truncated, body_len FROM event_body_blobs "
                     "ORDER BY event_id")
    assert rows == [(eid(1), 10 * MIB + 123, 10 * MIB, 1, 10 * MIB), (eid(2), 900, 5, 1, 5), (eid(3), 5, 5, 0, 5)]
    assert oracle.read_body(db, eid(1), "net_events", "response") == big[:10 * MIB]


def test_a_row_without_an_event_id_gets_twelve_lowercase_hex(tmp_path):
    with LedgerWriter(tmp_path) as w:
        row = net_row(0)
        del row["event_id"]
        w.insert("net_events", row, [Body("request", b"body of a row that named no event", "http.request")])
    db = tmp_path / "session.db"
    (event_id,), = query(db, "SELECT event_id FROM net_events")
    assert len(event_id) == 12 and set(event_id) <= set("0123456789abcdef")
    assert query(db, "SELECT event_id FROM event_body_blobs") == [(event_id,)]


def test_a_fresh_ledger_has_the_schema_and_the_writer_connection_enforces_foreign_keys(tmp_path):
    with LedgerWriter(tmp_path / "new" / "dir") as w:
        assert w.db_path == tmp_path / "new" / "dir" / "session.db"
        assert w.bodies_path == tmp_path / "new" / "dir" / "session.bodies"
        assert w._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert w._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert w._conn.execute("PRAGMA synchronous").fetchone() == (1,)
    assert query(w.db_path, "SELECT id, version FROM transport_schema") == [(1, 1)]
    assert w.bodies_path.read_bytes() == fmt.pack_file_header()


def test_close_checkpoints_the_wal_releases_the_lock_then_calls_on_close(tmp_path):
    seen = []

    def on_close(writer: LedgerWriter) -> None:
        # The lock is free: another writer can open at once.
        with LedgerWriter(writer.directory, lock_timeout=0):
            pass
        seen.append(writer.closed)

    w = LedgerWriter(tmp_path, on_close=on_close)
    w.insert("net_events", net_row(1), [Body("request", b"x" * 100, "http.request")])
    w.close()
    w.close()  # idempotent: on_close runs once
    assert seen == [True]
    wal = tmp_path / "session.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    with pytest.raises(LedgerError, match="closed"):
        w.insert("net_events", net_row(2))


def test_timestamps_are_rfc3339_utc_to_the_microsecond():
    assert ledger_timestamp(0) == "1970-01-01T00:00:00.000000Z"
    assert ledger_timestamp(1_750_000_000.123456) == "2025-06-15T15:06:40.123456Z"
    assert ledger_timestamp(1_750_000_000.9999996) == "2025-06-15T15:06:41.000000Z"


# --- blocks and the body index (§3.2.5-3.2.7, §8.8) ------------------------------------------------

def test_an_open_block_is_readable_after_each_flush_and_its_extent_tracks_the_file(tmp_path):
    db = tmp_path / "session.db"
    rng = random.Random(7)
    with LedgerWriter(tmp_path) as w:
        last = (0, 0)
        for i in range(6):
            data = text_bytes(rng, 3000)
            w.insert("net_events", net_row(i), [Body("request", data, "http.request")])
            w.flush()
            blocks = query(db, "SELECT block_offset, raw_len, disk_len FROM body_blocks")
            assert len(blocks) == 1
            block_offset, raw_len, disk_len = blocks[0]
            assert block_offset + disk_len == w.bodies_path.stat().st_size
            assert (raw_len, disk_len) > last
            last = (raw_len, disk_len)
            assert oracle.read_body(db, eid(i), "net_events", "request") == data


def test_two_bodies_over_half_a_block_fill_it_and_the_third_opens_the_next(tmp_path):
    db = tmp_path / "session.db"
    size = fmt.TARGET_BLOCK_BYTES // 2 + 1
    with LedgerWriter(tmp_path) as w:
        for i in range(3):
            w.insert("net_events", net_row(i), [Body("response", bytes([i]) * size, "http.request")])
    blocks = query(db, "SELECT block_offset, raw_len, disk_len FROM body_blocks ORDER BY block_offset")
    assert [b[1] for b in blocks] == [2 * size, size]
    assert blocks[1][0] == blocks[0][0] + blocks[0][2]
    assert blocks[1][0] + blocks[1][2] == (tmp_path / "session.bodies").stat().st_size
    data = (tmp_path / "session.bodies").read_bytes()
    assert oracle.walk_block(data, blocks[1][0])[-1].final
    with pytest.raises(oracle.OracleError, match="past the end of block"):
        oracle.ArchiveOracle(tmp_path / "session.bodies").read(blocks[1][0], size, 1)


def test_two_10_mib_bodies_land_in_two_blocks(tmp_path):
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", b"a" * (10 * MIB), "http.request"),
                                            Body("response", b"b" * (10 * MIB), "http.request")])
    db = tmp_path / "session.db"
    assert len(query(db, "SELECT * FROM body_blocks")) == 2
    assert oracle.read_body(db, eid(1), "net_events", "response") == b"b" * (10 * MIB)


def test_a_block_closes_after_an_hour_by_the_ledger_clock(tmp_path):
    clock = Clock()
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path, clock=clock) as w:
        w.insert("net_events", net_row(1), [Body("request", b"first hour", "http.request")])
        w.flush()
        clock.now += 3599
        w.insert("net_events", net_row(2), [Body("request", b"same block", "http.request")])
        clock.now += 1
        w.insert("net_events", net_row(3), [Body("request", b"next block", "http.request")])
        w.flush()
        clock.now -= 10_000  # a clock that went backwards never makes a block stale
        w.insert("net_events", net_row(4), [Body("request", b"still the next block", "http.request")])
    offsets = [r[0] for r in query(db, "SELECT block_offset FROM event_body_blobs ORDER BY event_id")]
    assert offsets[0] == offsets[1] != offsets[2] == offsets[3]


def test_an_empty_final_segment_does_not_refresh_sealed_at(tmp_path):
    clock = Clock()
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path, clock=clock)
    w.insert("net_events", net_row(1), [Body("request", b"sealed once", "http.request")])
    w.flush()
    (sealed, disk), = query(db, "SELECT sealed_at, disk_len FROM body_blocks")
    clock.now += 500
    w.close()
    (sealed_after, disk_after), = query(db, "SELECT sealed_at, disk_len FROM body_blocks")
    assert sealed_after == sealed == ledger_timestamp(T0) and disk_after > disk


def test_close_every_flush_closes_each_block(tmp_path):
    with LedgerWriter(tmp_path, close_every_flush=True) as w:
        for i in range(3):
            w.insert("net_events", net_row(i), [Body("request", b"block %d" % i, "http.request")])
            w.flush()
    assert len(query(tmp_path / "session.db", "SELECT * FROM body_blocks")) == 3


def _flush_one_body(directory: Path, steps: list[str]) -> None:
    """One body written and flushed, "commit" added to steps when the index commits."""
    w = LedgerWriter(directory)
    w._conn.set_trace_callback(lambda sql: steps.append("commit") if sql == "COMMIT" else None)
    w.insert("net_events", net_row(1), [Body("request", b"ordered", "http.request")])
    w.flush()
    w.close()


def test_the_archive_is_synced_before_the_index_commits(tmp_path, monkeypatch):
    steps: list[str] = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (steps.append("sync"), real_fdatasync(fd))[1])
    _flush_one_body(tmp_path, steps)
    assert steps[:2] == ["sync", "commit"]


def test_where_the_system_has_no_fdatasync_the_archive_is_still_synced_before_the_index_commits(tmp_path, monkeypatch):
    # macOS has no os.fdatasync: the writer takes F_FULLFSYNC there, plain fsync elsewhere.
    import fcntl

    steps: list[str] = []
    monkeypatch.delattr(os, "fdatasync")
    if hasattr(fcntl, "F_FULLFSYNC"):
        real_fcntl = fcntl.fcntl
        monkeypatch.setattr(fcntl, "fcntl", lambda fd, op, *a: (
            steps.append("sync") if op == fcntl.F_FULLFSYNC else None, real_fcntl(fd, op, *a))[1])
    else:
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (steps.append("sync"), real_fsync(fd))[1])
    _flush_one_body(tmp_path, steps)
    assert steps[:2] == ["sync", "commit"]
    assert len(query(tmp_path / "session.db", "SELECT * FROM body_blocks")) == 1


class _FailingCommit:
    """A connection whose next COMMIT fails as a full disk would (then behaves)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.fail = 1

    def execute(self, sql: str, *args):
        if sql == "COMMIT" and self.fail:
            self.fail -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_failed_flush_keeps_its_rows_and_the_retry_records_the_grown_extent_once(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"first body " * 20, "http.request")])
    real = w._conn
    w._conn = _FailingCommit(real)
    with pytest.raises(LedgerError, match="not written and they are kept and retried by the next flush"):
        w.flush()
    assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(0,)]
    w._conn = real
    w.insert("net_events", net_row(2), [Body("request", b"second body " * 20, "http.request")])
    w.flush()
    blocks = query(db, "SELECT block_offset, disk_len FROM body_blocks")
    assert len(blocks) == 1 and sum(blocks[0]) == w.bodies_path.stat().st_size
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(2,)]
    assert oracle.read_body(db, eid(1), "net_events", "request") == b"first body " * 20
    assert oracle.read_body(db, eid(2), "net_events", "request") == b"second body " * 20
    w.close()


def test_a_close_whose_flush_fails_says_its_rows_are_lost_not_retried(tmp_path):
    """A file size limit (a disk that fills) fails close's flush: its error said the rows were
    "kept and retried by the next flush", but a closed writer flushes nothing again."""
    root = Path(__file__).resolve().parents[2]
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path[:0] = [{str(root / "src")!r}, {str(root)!r}]
        from tests.writer.helpers import net_row
        from capsem_core.writer import LedgerWriter
        w = LedgerWriter(sys.argv[1])
        w.insert("net_events", net_row(0))
        w.flush()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
        for i in range(1, 11):
            w.insert("net_events", net_row(i, request_headers="h" * 50_000))
        try:
            w.close()
        except Exception as e:
            print(e)
        """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.startswith(f"{tmp_path / 'session.db'}: flush did not commit ("), out
    assert out.endswith("its rows and bodies were not written and the writer is closing, so they are lost\n"), out
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM net_events") == [(1,)]


def test_rows_the_schema_refuses_are_dropped_and_the_rest_commit(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"kept", "http.request")])
    w.insert("net_events", {**net_row(2), "headers_truncated": 7})
    w.insert("net_events", net_row(3))
    with pytest.raises(RowRejected, match="refused 1 rows.*CHECK constraint failed"):
        w.flush()
    assert [r[0] for r in query(db, "SELECT event_id FROM net_events ORDER BY id")] == [eid(1), eid(3)]
    assert w.rows_rejected == 1 and w.buffered_rows == 0
    w.close()
    assert oracle.read_body(db, eid(1), "net_events", "request") == b"kept"


@pytest.mark.parametrize("table, row, body, message", [
    ("no_such_table", {}, None, "not a session.db table"),
    ("body_blocks", {"block_offset": 16}, None, "not a session.db table this writer fills"),
    ("net_events", {"nonsense": 1}, None, "no column 'nonsense'"),
    ("fs_events", {"event_id": "0" * 12}, Body("request", b"x", "file.event"), "carry no archived bodies"),
    ("net_events", {"event_id": "ABCDEF012345"}, Body("request", b"x", "http.request"), "12 lowercase hex"),
    ("net_events", {"event_id": "0" * 12}, Body("sideways", b"x", "http.request"), "direction"),
    ("net_events", {"event_id": "0" * 12}, Body("request", b"x", "network.connect"), "event_type"),
    ("net_events", {"event_id": "0" * 12}, Body("request", "text", "http.request"), "must be bytes"),
])
def test_a_row_the_ledger_cannot_hold_is_refused_at_insert(tmp_path, table, row, body, message):
    with LedgerWriter(tmp_path) as w:
        with pytest.raises(ValueError, match=message):
            w.insert(table, row, [body] if body else ())
        assert w.buffered_rows == 0


def test_any_table_takes_rows_and_an_empty_body_iterable(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("fs_events", {"timestamp": "t", "action": "write", "path": "/a", "directory": "/", "name": "a"},
                 iter(()))
        w.insert("transport_events", {"event_id": eid(5), "timestamp_unix_ms": 1, "event_type": "network.connect",
                                      "event_json": "{}"})
    assert query(db, "SELECT path FROM fs_events") == [("/a",)]
    assert query(db, "SELECT event_id FROM transport_events") == [(eid(5),)]


def test_buffered_work_flushes_by_itself(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path, flush_rows=10) as w:
        for i in range(12):
            w.insert("net_events", net_row(i))
        w.wait()
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(10,)]
        # Bodies count too: 2 rows left over + 4 rows with one body each reach 10.
        for i in range(12, 15):
            w.insert("net_events", net_row(i), [Body("request", b"r%d" % i, "http.request")])
        w.wait()
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(10,)]
        w.insert("net_events", net_row(15), [Body("request", b"r15", "http.request")])
        w.wait()
        assert not w.committing
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(16,)]
        assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(4,)]
        assert oracle.read_body(db, eid(15), "net_events", "request") == b"r15"


def test_rows_holding_large_texts_and_blobs_flush_by_their_bytes(tmp_path):
    """flush_bytes bounds what a writer holds whatever carries the bytes: rows without bodies
    of half a MiB each were buffered until flush_rows (50 000 of them: 25 GB)."""
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path, flush_bytes=MIB) as w:
        for i in range(8):
            value: object = "h" * (MIB // 2) if i % 2 else b"\x00" * (MIB // 2)
            w.insert("net_events", net_row(i, request_headers=value))
        w.wait()
        assert w.flushes == 4 and w.buffered_rows == 0
        assert query(db, "SELECT COUNT(*) FROM net_events") == [(8,)]


def _write_with_background_flushes(directory: Path, codec: str) -> None:
    rng = random.Random(99)
    shared = [rng.randbytes(rng.choice([600, 3000])) for _ in range(20)]
    with LedgerWriter(directory, codec=codec, clock=Clock(), flush_rows=25) as w:
        for i in range(400):
            w.insert("net_events", net_row(i), [Body("request", rng.choice(shared), "http.request"),
                                                Body("response", text_bytes(rng, rng.randint(10, 4000)),
                                                     "http.request")])


@pytest.mark.parametrize("codec", CODECS)
def test_background_flushes_give_the_same_ledger_every_time(tmp_path, codec):
    _write_with_background_flushes(tmp_path / "a", codec)
    _write_with_background_flushes(tmp_path / "b", codec)
    assert (tmp_path / "a" / "session.bodies").read_bytes() == (tmp_path / "b" / "session.bodies").read_bytes()
    rows = "SELECT event_id, direction, block_offset, body_offset, body_len, created_at FROM event_body_blobs ORDER BY id"
    assert query(tmp_path / "a" / "session.db", rows) == query(tmp_path / "b" / "session.db", rows)
    bodies = oracle.archived_bodies(tmp_path / "a" / "session.db")
    assert len(bodies) == 800
    spans = query(tmp_path / "a" / "session.db", "SELECT COUNT(DISTINCT block_offset || ':' || body_offset) "
                                                 "FROM event_body_blobs WHERE direction = 'request'")[0][0]
    assert spans < 100  # 20 shared request bodies, reused within and across blocks
    oracle.check_index_extents(tmp_path / "a" / "session.db")


def test_a_failed_background_flush_surfaces_and_its_rows_are_retried(tmp_path):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path, flush_rows=4)
    real = w._conn
    w._conn = _FailingCommit(real)
    w.insert("net_events", net_row(1), [Body("request", b"one " * 100, "http.request")])
    w.insert("net_events", net_row(2), [Body("request", b"two " * 100, "http.request")])  # starts a flush
    with pytest.raises(LedgerError, match="not written and they are kept and retried by the next flush"):
        w.wait()
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(0,)]
    w.insert("net_events", net_row(3), [Body("request", b"three " * 100, "http.request")])
    w.close()
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(3,)]
    assert [b.data for b in oracle.archived_bodies(db)] == [b"one " * 100, b"two " * 100, b"three " * 100]
    (block_offset, disk_len), = query(db, "SELECT block_offset, disk_len FROM body_blocks")
    assert block_offset + disk_len == (tmp_path / "session.bodies").stat().st_size


def test_a_later_body_with_the_same_key_replaces_the_earlier_row(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("response", b"partial", "http.request")])
        w.flush()
        w.insert("exec_events", {"event_id": eid(1), "timestamp": "t", "exec_id": 1, "command": "ls"},
                 [Body("stdout", b"listing", "process.exec")])
        w.insert("net_events", net_row(1), [Body("response", b"complete", "http.request")])
    assert oracle.read_body(db, eid(1), "net_events", "response") == b"complete"
    assert oracle.read_body(db, eid(1), "exec_events", "stdout") == b"listing"
    assert query(db, "SELECT COUNT(*) FROM event_body_blobs") == [(2,)]


# --- the ledger as a pair: lock, symlinks, schema, extents ------------------------------------------

def test_a_second_writer_on_the_same_ledger_is_refused(tmp_path):
    with LedgerWriter(tmp_path):
        with pytest.raises(WriterBusy, match="exactly one writer"):
            LedgerWriter(tmp_path, lock_timeout=0.1)
    LedgerWriter(tmp_path, lock_timeout=0).close()


def test_a_writer_in_another_process_holds_the_ledger(tmp_path):
    src = Path(__file__).resolve().parents[2] / "src"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(src)!r})
            from capsem_core.writer import LedgerWriter
            with LedgerWriter({str(tmp_path)!r}):
                print("held", flush=True)
                sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(WriterBusy, match=str(tmp_path)):
            LedgerWriter(tmp_path, lock_timeout=0.1)
    finally:
        child.communicate("done\n", timeout=30)
    LedgerWriter(tmp_path, lock_timeout=0).close()


@pytest.mark.parametrize("name", ["session.db", "session.bodies"])
def test_a_symlinked_ledger_file_is_refused_and_its_target_untouched(tmp_path, name):
    target = tmp_path / "target"
    target.write_bytes(b"not yours")
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / name).symlink_to(target)
    with pytest.raises(SymlinkRefused, match=name):
        LedgerWriter(ledger)
    assert target.read_bytes() == b"not yours"


def test_a_ledger_from_an_older_build_is_refused_by_name(tmp_path):
    with LedgerWriter(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "session.db")
    conn.executescript("DROP TABLE transport_events; DROP TABLE transport_schema;")
    conn.close()
    before = (tmp_path / "session.db").read_bytes()
    with pytest.raises(SchemaMismatch, match=r"session\.db.*predates the transport ledger"):
        LedgerWriter(tmp_path)
    assert (tmp_path / "session.db").read_bytes() == before


def test_a_sqlite_file_that_is_no_ledger_is_refused_exactly_as_it_was_found(tmp_path):
    """Another program's database named session.db: refused before the writer's PRAGMAs, so its
    journal mode (the file header's bytes 18-19) is not switched to WAL on the way out."""
    db = tmp_path / "session.db"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('not a ledger');")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SchemaMismatch, match=r"session\.db.*not a Capsem session ledger"):
        LedgerWriter(tmp_path)
    assert db.read_bytes() == before
    assert not (tmp_path / "session.db-wal").exists() and not (tmp_path / "session.bodies").exists()
    assert before[18:20] == b"\x01\x01"  # a rollback-journal file; WAL would make it 2, 2


def test_an_index_naming_bytes_past_the_archive_stores_no_bodies_and_leaves_the_file_alone(tmp_path):
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", os.urandom(2000), "http.request")])
    archive = tmp_path / "session.bodies"
    archive.write_bytes(archive.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="past the end of the archive"):
        w = LedgerWriter(tmp_path)
    with w:
        assert w.archive is None and "stores no bodies" in w.archive_out_of_service
        w.insert("net_events", net_row(2), [Body("request", b"dropped", "http.request")])
        assert w.bodies_dropped == 1
    assert archive.stat().st_size == 100
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM net_events") == [(2,)]
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM event_body_blobs") == [(1,)]


def test_a_v1_archive_beside_a_ledger_is_left_alone_and_no_bodies_are_stored(tmp_path):
    archive = tmp_path / "session.bodies"
    v1 = b"CAPSEMBL\x01\x00\x00\x00\x00\x00\x00\x00BLK1"
    archive.write_bytes(v1)
    with pytest.warns(RuntimeWarning, match="bad archive header"):
        w = LedgerWriter(tmp_path)
    with w:
        w.insert("net_events", net_row(1), [Body("request", b"nowhere to go", "http.request")])
    assert archive.read_bytes() == v1
    assert query(tmp_path / "session.db", "SELECT COUNT(*) FROM net_events") == [(1,)]


def test_a_failed_append_retires_the_archive_but_keeps_committed_bodies_and_rows(tmp_path, monkeypatch):
    db = tmp_path / "session.db"
    w = LedgerWriter(tmp_path)
    w.insert("net_events", net_row(1), [Body("request", b"safe", "http.request")])
    w.flush()

    def failing_write(fd: int, data: bytes) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "write", failing_write)
    w.insert("net_events", net_row(2), [Body("request", b"lost", "http.request")])
    with pytest.warns(RuntimeWarning, match="no more bodies"):
        w.flush()
    monkeypatch.undo()
    w.insert("net_events", net_row(3), [Body("request", b"after", "http.request")])
    w.close()
    assert w.bodies_dropped == 2
    assert query(db, "SELECT COUNT(*) FROM net_events") == [(3,)]
    assert [b.data for b in oracle.archived_bodies(db)] == [b"safe"]
    oracle.check_index_extents(db)


@pytest.mark.parametrize("sidecar", ["-journal", "-wal"])
def test_a_writer_beside_a_fifo_sidecar_refuses_by_name_and_never_waits(tmp_path: Path, sidecar: str) -> None:
    """SQLite's open of a FIFO -journal (its hot-journal test) waits for a writer for ever, deaf
    to SIGTERM; a reader refused one, and a writer opening the same ledger must too."""
    directory = tmp_path / "sess"
    with LedgerWriter(directory) as w:
        w.insert("net_events", net_row(0))
    os.mkfifo(directory / f"session.db{sidecar}")
    probe = ("import sys\nfrom capsem_core.errors import LedgerError\nfrom capsem_core.writer import LedgerWriter\n"
             "try:\n    LedgerWriter(sys.argv[1]).close()\nexcept LedgerError as exc:\n    print(exc)\n")
    # The timeout only guards against the hang this test is about.
    done = subprocess.run([sys.executable, "-c", probe, str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "not a regular file" in done.stdout and sidecar in done.stdout, done


def test_rows_a_failed_flush_puts_back_count_towards_flush_bytes_again() -> None:
    """A job that did not commit goes back in front of the buffers with its bytes: else each
    failure would let another flush_bytes pile up on top of the rows it put back."""
    from capsem_core.writer.flush import Pending

    pending = Pending()
    pending.buffered, pending.buffered_bytes = 3, 3 * MIB
    job = pending.take("2026-12-07T10:00:00.000000Z", lambda: None)
    assert (pending.buffered, pending.buffered_bytes) == (0, 0)
    pending.restore(job)
    assert (pending.buffered, pending.buffered_bytes) == (3, 3 * MIB)
