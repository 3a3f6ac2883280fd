"""Behaviour of the Ledger reader: opening the pair, ready(), verified reads, archive-order
iteration, and copy / fork / delete of the pair as one unit."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capsem_core import errors
from capsem_core import format as fmt
from capsem_core.ledger import Ledger, delete_ledger
from capsem_core.writer import Body, LedgerWriter


def _event_id(i: int) -> str:
    return f"{i:012x}"


def write_ledger(directory: Path, count: int = 40, *, codec: str = "deflate", flushes: int = 4) -> list[bytes]:
    """A ledger with ``count`` net_events, each with a distinct request body, cut into segments."""
    bodies = []
    with LedgerWriter(directory, codec=codec) as writer:
        for i in range(count):
            data = (f"request {i} ".encode() * (i + 3)) + bytes([i % 251])
            bodies.append(data)
            writer.insert("net_events", {"event_id": _event_id(i), "timestamp": "2026-11-30T12:00:00.000000Z",
                                         "domain": "api.anthropic.com", "decision": "allowed"},
                          bodies=[Body("request", data, "http.request")])
            if (i + 1) % (count // flushes) == 0:
                writer.flush()
    return bodies


def test_a_body_reads_back_verified_for_both_codecs(tmp_path: Path) -> None:
    for codec in ("deflate", "zstd"):
        d = tmp_path / codec
        bodies = write_ledger(d, codec=codec)
        with Ledger(d) as ledger:
            assert ledger.read_body(_event_id(7), "net_events", "request") == bodies[7]
            assert [b.data for b in ledger.bodies()] == bodies


def test_a_ledger_opens_from_its_directory_or_its_session_db(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with Ledger(tmp_path / "session.db") as a, Ledger(tmp_path) as b:
        assert a.db_path == b.db_path
        assert a.bodies_path == tmp_path / "session.bodies"


def test_bodies_come_in_archive_order_from_the_kernel_and_leave_the_cursor_untouched(tmp_path: Path) -> None:
    written = write_ledger(tmp_path, count=40, flushes=4)
    with Ledger(tmp_path) as ledger:
        assert [b.data for b in ledger.bodies()] == written
        # The bulk kernel (each segment inflated once: tests/native/test_verify_kernel.py)
        # read them; read_body's cursors and their cache were never used.
        assert ledger._archive.segments_inflated == 0


def test_a_missing_half_is_refused_by_name(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    (tmp_path / "session.bodies").unlink()
    with pytest.raises(errors.LedgerError, match="session.bodies is missing") as info:
        Ledger(tmp_path)
    assert info.value.path == tmp_path / "session.bodies"


def test_a_missing_session_db_is_refused_by_name(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    (tmp_path / "session.db").unlink()
    with pytest.raises(errors.LedgerError, match="session.db is missing"):
        Ledger(tmp_path)


def test_a_symlinked_ledger_file_is_refused(tmp_path: Path) -> None:
    write_ledger(tmp_path / "real")
    link = tmp_path / "link"
    link.mkdir()
    os.symlink(tmp_path / "real" / "session.db", link / "session.db")
    os.symlink(tmp_path / "real" / "session.bodies", link / "session.bodies")
    with pytest.raises(errors.SymlinkRefused):
        Ledger(link)


def test_a_foreign_archive_header_is_refused(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with open(tmp_path / "session.bodies", "r+b") as f:
        f.write(b"NOTCAPSM")
    with pytest.raises(errors.BadFileHeader) as info:
        Ledger(tmp_path)
    assert "session.bodies" in str(info.value)


def test_an_archive_of_another_version_is_refused(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with open(tmp_path / "session.bodies", "r+b") as f:
        f.seek(8)
        f.write(b"\x01\x00")
    with pytest.raises(errors.BadFileHeader):
        Ledger(tmp_path)


def test_an_older_schema_is_refused_by_name(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with sqlite3.connect(tmp_path / "session.db") as conn:
        conn.execute("DROP TABLE transport_schema")
    with pytest.raises(errors.SchemaMismatch) as info:
        Ledger(tmp_path)
    assert "session.db" in str(info.value)


def test_ready_checks_shape_once_per_schema_version(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with Ledger(tmp_path) as ledger:
        for _ in range(50):
            ledger.ready()
        assert ledger._ready.full_checks == 1


def test_a_body_whose_index_hash_was_changed_is_refused(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with sqlite3.connect(tmp_path / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_hash = 'blake3:' || printf('%064d', 0) WHERE event_id = ?",
                     (_event_id(3),))
    with Ledger(tmp_path) as ledger:
        with pytest.raises(errors.BodyHashMismatch, match="does not match the row that named it"):
            ledger.read_body(_event_id(3), "net_events", "request")
        assert ledger.read_body(_event_id(4), "net_events", "request")


def test_a_flipped_payload_byte_is_never_returned_as_a_body(tmp_path: Path) -> None:
    write_ledger(tmp_path, count=8, flushes=1)
    inside_first_payload = fmt.FILE_HEADER_BYTES + fmt.BLOCK_HEADER_BYTES + fmt.SEGMENT_HEADER_BYTES + 10
    with open(tmp_path / "session.bodies", "r+b") as f:
        f.seek(inside_first_payload)
        b = f.read(1)
        f.seek(inside_first_payload)
        f.write(bytes([b[0] ^ 0x40]))
    with Ledger(tmp_path) as ledger:
        with pytest.raises(errors.ArchiveError):
            list(ledger.bodies())


def test_an_unknown_body_is_a_key_error(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with Ledger(tmp_path) as ledger, pytest.raises(KeyError):
        ledger.read_body("ffffffffffff", "net_events", "request")


@pytest.mark.parametrize(("table", "direction", "named"), [("no_such_table", "request", "body table"),
                                                           ("net_events", "sideways", "body direction")])
def test_a_table_or_direction_no_body_can_have_is_a_value_error_not_a_missing_body(
        tmp_path: Path, table: str, direction: str, named: str) -> None:
    write_ledger(tmp_path)
    with Ledger(tmp_path) as ledger, pytest.raises(ValueError, match=f"not a {named}"):
        ledger.read_body(_event_id(0), table, direction)


def test_a_copy_leaves_the_torn_tail_behind_and_passes_quick_check(tmp_path: Path) -> None:
    bodies = write_ledger(tmp_path / "a")
    committed = os.path.getsize(tmp_path / "a" / "session.bodies")
    with open(tmp_path / "a" / "session.bodies", "ab") as f:
        f.write(b"SGMT torn tail that no row names")
    with Ledger(tmp_path / "a") as ledger:
        copy = ledger.copy_to(tmp_path / "b")
    with copy:
        assert os.path.getsize(copy.bodies_path) == committed
        assert [b.data for b in copy.bodies()] == bodies


def test_a_copy_refuses_to_overwrite_an_existing_ledger(tmp_path: Path) -> None:
    write_ledger(tmp_path / "a")
    write_ledger(tmp_path / "b")
    with Ledger(tmp_path / "a") as ledger, pytest.raises(errors.LedgerError, match="refusing to overwrite"):
        ledger.copy_to(tmp_path / "b")


def test_a_copy_refuses_a_directory_holding_anything_a_stale_wal_most_of_all(tmp_path: Path) -> None:
    """A -wal left in the destination would be replayed into the copied session.db."""
    write_ledger(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "session.db-wal").write_bytes(b"a -wal of another database")
    with Ledger(tmp_path / "a") as ledger, pytest.raises(errors.LedgerError, match="not empty"):
        ledger.copy_to(tmp_path / "b")
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["session.db-wal"]


def test_a_copy_of_a_ledger_whose_archive_is_short_fails_and_leaves_nothing(tmp_path: Path) -> None:
    write_ledger(tmp_path / "a")
    (tmp_path / "there").mkdir()
    with Ledger(tmp_path / "a") as ledger:
        os.truncate(tmp_path / "a" / "session.bodies", 100)
        for target in ("b", "there"):
            with pytest.raises(errors.LedgerError, match="index commits"):
                ledger.copy_to(tmp_path / target)
    # Not even the directory the copy made; one that was there stays, empty.
    assert not (tmp_path / "b").exists() and list((tmp_path / "there").iterdir()) == []


def test_a_copy_goes_through_the_output_path_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_ledger(tmp_path / "a")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_bytes(b"mine")
    monkeypatch.chdir(tmp_path)
    with Ledger(tmp_path / "a") as ledger:
        with pytest.raises(errors.SymlinkRefused):
            ledger.copy_to(tmp_path / "link")                      # never written behind a link
        with pytest.raises(errors.LedgerError, match="does not exist"):
            ledger.copy_to(tmp_path / "missing" / "parent" / "b")  # no parent directory made
        with pytest.raises(errors.LedgerError, match="not a directory"):
            ledger.copy_to(tmp_path / "file")                       # a LedgerError, not FileExistsError
        for name in ("", "x/.."):                                    # never the current directory
            with pytest.raises(errors.LedgerError):
                ledger.copy_to(name)
    assert list((tmp_path / "real").iterdir()) == [] and not (tmp_path / "missing").exists()
    assert (tmp_path / "file").read_bytes() == b"mine" and not (tmp_path / "session.db").exists()
    assert not (tmp_path / "x").exists()


def test_a_fork_continues_under_a_new_writer(tmp_path: Path) -> None:
    bodies = write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger:
        ledger.fork(tmp_path / "b").close()
    with LedgerWriter(tmp_path / "b") as writer:
        writer.insert("net_events", {"event_id": "abcdefabcdef", "timestamp": "2026-11-30T12:00:01.000000Z",
                                     "domain": "example.com", "decision": "allowed"},
                      bodies=[Body("request", b"after the fork", "http.request")])
    with Ledger(tmp_path / "b") as fork, Ledger(tmp_path / "a") as original:
        assert fork.read_body("abcdefabcdef", "net_events", "request") == b"after the fork"
        assert len(list(fork.bodies())) == len(bodies) + 1
        assert len(list(original.bodies())) == len(bodies)


def test_delete_removes_the_pair_and_its_sidecars(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with Ledger(tmp_path) as ledger:
        ledger.delete()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_delete_is_refused_while_a_writer_holds_the_ledger(tmp_path: Path) -> None:
    write_ledger(tmp_path)
    with LedgerWriter(tmp_path):
        with pytest.raises(errors.WriterBusy):
            delete_ledger(tmp_path)
    assert (tmp_path / "session.db").exists() and (tmp_path / "session.bodies").exists()


def test_delete_is_refused_while_a_writer_whose_lock_file_was_deleted_still_writes(tmp_path: Path) -> None:
    """The directory lock outlives the lock file: deleting the file never lets delete in."""
    write_ledger(tmp_path)
    with pytest.raises(errors.WriterLockLost):  # the writer's own close says its file went
        with LedgerWriter(tmp_path):
            (tmp_path / "session.db-writer.lock").unlink()
            with pytest.raises(errors.WriterBusy, match="cannot be deleted while it is written"):
                delete_ledger(tmp_path)
            assert (tmp_path / "session.db").exists() and (tmp_path / "session.bodies").exists()
    assert (tmp_path / "session.db").exists() and (tmp_path / "session.bodies").exists()


def test_verify_reports_a_damaged_body_by_event_and_block(tmp_path: Path) -> None:
    write_ledger(tmp_path, count=8, flushes=1)
    with Ledger(tmp_path) as ledger:
        assert ledger.verify() == (8, [])
    with sqlite3.connect(tmp_path / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_hash = 'blake3:' || printf('%064d', 0) WHERE event_id = ?",
                     (_event_id(2),))
    with Ledger(tmp_path) as ledger:
        verified, findings = ledger.verify(threads=1)
    assert verified == 7
    [finding] = findings
    # A body-level record, not check's report Finding: the package has one class of that name.
    from capsem_core import verify as _verify
    assert type(finding) is _verify.BodyFault and not hasattr(_verify, "Finding")
    assert (finding.event_id, finding.source_table, finding.direction) == (_event_id(2), "net_events", "request")
    assert finding.block_offset == fmt.FILE_HEADER_BYTES
    assert (finding.kind, finding.segment_offset) == ("body_hash", None)


def test_a_text_span_in_the_index_is_a_ledger_error_naming_session_db(tmp_path: Path) -> None:
    write_ledger(tmp_path, count=8, flushes=1)
    with sqlite3.connect(tmp_path / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_offset = 'abc' WHERE event_id = ?", (_event_id(1),))
    with Ledger(tmp_path) as ledger:
        with pytest.raises(errors.LedgerError, match="non-integer span") as info:
            ledger.read_body(_event_id(1), "net_events", "request")
        assert info.value.path == tmp_path / "session.db"
        with pytest.raises(errors.LedgerError, match="non-integer span"):
            list(ledger.bodies())


def _archive_handles(bodies: Path) -> tuple[int, int]:
    """(mappings of ``bodies`` in /proc/self/maps, descriptors open on it in /proc/self/fd)."""
    target = os.path.realpath(bodies)
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if line.rstrip("\n").endswith(" " + target))
    fds = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                fds += 1
        except OSError:
            pass  # the descriptor listdir itself used, now closed
    return maps, fds


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_close_releases_the_archive_map_and_descriptor_and_later_reads_are_refused(tmp_path: Path) -> None:
    write_ledger(tmp_path, count=10)
    bodies = tmp_path / "session.bodies"
    assert _archive_handles(bodies) == (0, 0)
    ledger = Ledger(tmp_path)
    assert ledger.read_body(_event_id(3), "net_events", "request")
    maps, fds = _archive_handles(bodies)
    assert maps >= 1 and fds >= 1  # the reader really holds the archive open
    ledger.close()
    assert _archive_handles(bodies) == (0, 0)
    assert ledger.closed
    ledger.close()  # idempotent
    for use in (lambda: ledger.read_body(_event_id(3), "net_events", "request"), lambda: list(ledger.bodies()),
                ledger.ready, ledger.committed_extent, ledger.verify, lambda: ledger.copy_to(tmp_path / "copy")):
        with pytest.raises(errors.LedgerError, match="ledger is closed"):
            use()
    with Ledger(tmp_path) as again:
        assert again.read_body(_event_id(3), "net_events", "request")
    assert _archive_handles(bodies) == (0, 0)


class _LockWatchingConnection:
    """A Ledger's connection that notes, at every query, whether the Ledger's lock is held:
    close() frees the connection under that lock, so a query run outside it could be stepped
    by SQLite while another thread frees it (a segfault)."""

    def __init__(self, ledger: Ledger) -> None:
        self.conn = ledger._conn
        self.lock = ledger._lock
        self.held: list[bool] = []

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> Any:
        self.held.append(self.lock.locked())
        return self.conn.execute(sql, params)

    def close(self) -> None:
        self.conn.close()


def test_every_query_runs_under_the_lock_close_takes(tmp_path: Path) -> None:
    written = write_ledger(tmp_path, count=10)
    reads: list[tuple[str, Any]] = [
        ("read_body", lambda ledger: ledger.read_body(_event_id(3), "net_events", "request")),
        ("committed_extent", lambda ledger: ledger.committed_extent()),
        ("bodies_of", lambda ledger: ledger.bodies_of(_event_id(3))),
    ]
    results = {}
    for name, read in reads:
        with Ledger(tmp_path) as ledger:
            conn = _LockWatchingConnection(ledger)
            ledger._conn = conn  # type: ignore[assignment]
            results[name] = read(ledger)
            assert conn.held and all(conn.held), (name, conn.held)
    assert results["read_body"] == written[3]
    assert results["committed_extent"] == os.path.getsize(tmp_path / "session.bodies")
    assert results["bodies_of"] == [("net_events", "request", None, len(written[3]))]


@pytest.mark.parametrize("threads", [-1, 1.5, float("nan"), 2**31, "2", None])
def test_every_threads_argument_is_checked_alike(tmp_path: Path, threads: object) -> None:
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger:
        calls = [lambda: ledger.index(threads=threads), lambda: ledger.read_bodies(threads=threads),
                 lambda: next(ledger.body_batches(threads=threads)), lambda: next(ledger.bodies(threads=threads)),
                 lambda: ledger.verify(threads=threads), lambda: ledger.scan("net_events", threads=threads),
                 lambda: ledger.export_warc(tmp_path / "out.warc.gz", threads=threads)]
        for call in calls:
            with pytest.raises((TypeError, ValueError), match="threads"):
                call()
    assert not (tmp_path / "out.warc.gz").exists()


@pytest.mark.parametrize(("kwargs", "error"), [({"incremental": True, "max_age": float("nan")}, ValueError),
                                               ({"incremental": True, "max_age": -1.0}, ValueError),
                                               ({"incremental": True, "max_age": [1]}, TypeError),
                                               ({"subset": 1}, TypeError)])
def test_verify_refuses_an_age_or_subset_of_the_wrong_kind(tmp_path: Path, kwargs: dict[str, object],
                                                           error: type) -> None:
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger, pytest.raises(error):
        ledger.verify(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("cache", [float("inf"), float("nan"), True, 1.5, "64", -1])
def test_a_block_cache_bound_that_is_no_byte_count_is_refused_by_name(tmp_path: Path, cache: object) -> None:
    """inf and True were taken (as what? a cache of any size, of one byte), NaN failed in
    int() naming nothing."""
    write_ledger(tmp_path / "a")
    with pytest.raises((TypeError, ValueError), match="block_cache_bytes"):
        Ledger(tmp_path / "a", block_cache_bytes=cache)  # type: ignore[arg-type]
    with Ledger(tmp_path / "a", block_cache_bytes=0) as ledger:
        assert len(ledger.index()) > 0


def test_a_row_of_an_index_is_chosen_by_an_int_never_a_bool_or_a_float(tmp_path: Path) -> None:
    """True read as row 1 and 1.5 as row 1 (or an IndexError about a tuple)."""
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger:
        index = ledger.index()
    for row in (True, 1.5, np.bool_(False)):
        with pytest.raises(TypeError, match="a row is chosen by an int"):
            index.key(row)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="a row is chosen by an int"):
            index.hash_text(row)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="array of float64"):
        index.event_id[np.array([0.5])]
    assert index.key(np.int64(1)) == index.key(1) and index.key(-1) == index.key(len(index) - 1)
    assert len(index.event_id[[]]) == 0 and len(index.event_id[np.array([0, 1])]) == 2


@pytest.mark.parametrize("poll", [0, -1, float("nan"), float("inf"), 1e12, "1"])
def test_follow_refuses_a_poll_it_could_not_wait_on_when_called(tmp_path: Path, poll: object) -> None:
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger, pytest.raises(ValueError, match="poll"):
        ledger.follow(poll=poll)  # type: ignore[arg-type]


def test_read_body_of_an_event_id_that_is_not_text_is_a_type_error_never_a_lookup(tmp_path: Path) -> None:
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger:
        for event_id in (None, 1, _event_id(0).encode()):
            with pytest.raises(TypeError, match="event_id"):
                ledger.read_body(event_id, "net_events", "request")  # type: ignore[arg-type]
        assert ledger.read_body(_event_id(0), "net_events", "request")


def test_bodies_of_an_event_id_that_is_not_text_is_a_type_error(tmp_path: Path) -> None:
    write_ledger(tmp_path / "a")
    with Ledger(tmp_path / "a") as ledger:
        for event_id in (None, 1, b"abc", 2**63):
            with pytest.raises(TypeError, match="event_id"):
                ledger.bodies_of(event_id)  # type: ignore[arg-type]
