"""What the writer takes from its caller, where a mistake used to cost data silently: a body as
a memoryview of wider items, a body field of a type Capsem never binds, two bodies of one row
in one direction, a text with a lone
surrogate (as Event.row hands out bytes that were not UTF-8), a writer dropped without
close(), and ``delete_ledger("")``."""

from __future__ import annotations

import array
import gc
import os
from pathlib import Path

import pytest
from tests.writer.helpers import eid, net_row, query

from capsem_core.errors import LedgerError, RowRejected
from capsem_core.ledger import Ledger, delete_ledger
from capsem_core.writer import Body, LedgerWriter


@pytest.mark.parametrize("view", [memoryview(array.array("i", range(100))),
                                  memoryview(bytes(64)).cast("B", (8, 8)),
                                  memoryview(bytes(range(64)))[::2]])
def test_a_body_view_that_is_not_flat_bytes_is_refused_at_insert(tmp_path: Path, view: memoryview) -> None:
    with LedgerWriter(tmp_path / "l") as w:
        with pytest.raises(ValueError, match="memoryview"):
            w.insert("net_events", net_row(1), bodies=[Body("request", view, "http.request")])
    assert query(tmp_path / "l" / "session.db", "SELECT COUNT(*) FROM event_body_blobs") == [(0,)]


def test_a_flat_byte_view_is_written_and_reads_back(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    with LedgerWriter(tmp_path / "l") as w:
        w.insert("net_events", net_row(1), bodies=[Body("request", memoryview(data), "http.request")])
    with Ledger(tmp_path / "l") as ledger:
        assert ledger.read_body(eid(1), "net_events", "request") == data
        assert ledger.verify().faults == []


@pytest.mark.parametrize("field", [{"content_type": b"text/plain"}, {"content_type": 5},
                                   {"original_bytes": float("inf")}, {"original_bytes": 12.5},
                                   {"original_bytes": "5"}, {"original_bytes": True}, {"original_bytes": 1 << 63},
                                   {"original_bytes": -1}])
def test_a_body_field_capsem_would_never_bind_is_refused_at_insert(tmp_path: Path, field: dict[str, object]) -> None:
    """event_body_blobs is not STRICT and the writer's rows skip its CHECKs: a bytes content
    type was stored as a BLOB, an infinite original size as a REAL (a string one was a bare
    TypeError, 2**63 a row rejected at commit after its bytes were archived)."""
    with LedgerWriter(tmp_path / "l") as w:
        with pytest.raises(ValueError, match="^a body's (content_type|original_bytes) must be"):
            w.insert("net_events", net_row(1), bodies=[Body("request", b"hello", "http.request", **field)])
        w.insert("net_events", net_row(2), bodies=[Body("request", b"hello", "http.request", "text/plain", 9)])
    assert query(tmp_path / "l" / "session.db",
                 "SELECT event_id, typeof(content_type), typeof(original_bytes) FROM event_body_blobs") == [
        (eid(2), "text", "integer")]
    assert query(tmp_path / "l" / "session.db", "SELECT COUNT(*) FROM net_events") == [(1,)]


def test_two_bodies_of_one_row_in_one_direction_are_refused_not_one_replaced(tmp_path: Path) -> None:
    with LedgerWriter(tmp_path / "l") as w:
        with pytest.raises(ValueError, match="share direction 'request'"):
            w.insert("net_events", net_row(1), bodies=[Body("request", b"first", "http.request"),
                                                       Body("request", b"second", "http.request")])


def test_a_lone_surrogate_rejects_its_row_and_the_rest_commit(tmp_path: Path) -> None:
    with LedgerWriter(tmp_path / "l") as w:
        w.insert("net_events", net_row(1), bodies=[Body("request", b"kept", "http.request")])
        w.insert("net_events", net_row(2, domain="caf\udce9.example"))
        with pytest.raises(RowRejected):
            w.flush()
        w.insert("net_events", net_row(3))
    assert query(tmp_path / "l" / "session.db", "SELECT event_id FROM net_events ORDER BY id") == [(eid(1),),
                                                                                                  (eid(3),)]
    with Ledger(tmp_path / "l") as ledger:
        assert ledger.read_body(eid(1), "net_events", "request") == b"kept"


def _open_descriptors() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors through /proc")
def test_a_writer_dropped_without_close_lets_go_of_its_files_and_locks(tmp_path: Path) -> None:
    w = LedgerWriter(tmp_path / "l")
    w.insert("net_events", net_row(1))
    w.flush()
    del w
    gc.collect()
    assert not {p for p in _open_descriptors() if p.startswith(str(tmp_path))}
    with LedgerWriter(tmp_path / "l", lock_timeout=0) as again:   # not WriterBusy
        again.insert("net_events", net_row(2))
    assert query(tmp_path / "l" / "session.db", "SELECT COUNT(*) FROM net_events") == [(2,)]


def test_delete_ledger_of_an_empty_path_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    LedgerWriter(tmp_path).close()
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(LedgerError, match="is empty"):
        delete_ledger("")
    assert sorted(os.listdir(tmp_path)) == before


def test_a_writer_interrupted_while_it_creates_the_archive_leaves_none_or_a_whole_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C between creating session.bodies and writing its 16-byte header left an empty
    file, which check called a damaged archive until the next writer repaired it."""
    from capsem_core.check import check_ledger

    real_rename = os.rename

    def interrupted_rename(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt   # the header written, the name not yet given

    monkeypatch.setattr(os, "rename", interrupted_rename)
    with pytest.raises(KeyboardInterrupt):
        LedgerWriter(tmp_path / "l")
    monkeypatch.setattr(os, "rename", real_rename)
    assert sorted(p.name for p in (tmp_path / "l").iterdir() if "bodies" in p.name) == []   # no archive, no temporary
    report = check_ledger(tmp_path / "l" / "session.db", verify_bodies=True)
    assert report.sound, [f.message for c in report.checks.values() for f in c.findings]
    with LedgerWriter(tmp_path / "l") as w:   # the next writer goes on
        w.insert("net_events", net_row(1), bodies=[Body("request", b"after", "http.request")])
    with Ledger(tmp_path / "l") as ledger:
        assert ledger.read_body(eid(1), "net_events", "request") == b"after"
