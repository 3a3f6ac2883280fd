"""How a snapshot's connections read session.db: a small file through SQLite's memory map, whole,
when every connection of the read mapping it stays within the budget; a larger one through
read(2), so what stays resident never grows with the file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from capsem_core import snapshot
from capsem_core.check import check_ledger
from capsem_core.sample import write_sample_ledger


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("snapshot") / "ledger"
    write_sample_ledger(directory, seed=5, mix="realistic", bodies=200)
    return directory / "session.db"


def _mapped(snap: snapshot.Snapshot) -> list[int]:
    return [c.execute("PRAGMA mmap_size").fetchone()[0] for c in (snap.conn, *snap.workers)]


def test_a_small_session_db_is_mapped_whole_on_every_connection(ledger: Path) -> None:
    snap = snapshot.Snapshot.open(ledger, workers=2)
    try:
        assert snap.workers   # the file is the snapshot: the workers share it
        assert _mapped(snap) == [ledger.stat().st_size] * (1 + len(snap.workers))
    finally:
        snap.close()


def test_a_session_db_whose_maps_would_pass_the_budget_is_read_without_one(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = ledger.stat().st_size
    # Two connections fit, three do not.
    monkeypatch.setattr(snapshot, "SMALL_MAP_BUDGET", 2 * size)
    snap = snapshot.Snapshot.open(ledger, workers=2)
    try:
        assert _mapped(snap) == [0, 0, 0]
    finally:
        snap.close()
    snap = snapshot.Snapshot.open(ledger, workers=1)
    try:
        assert _mapped(snap) == [size, size]
    finally:
        snap.close()


def test_the_map_of_each_connection_is_the_whole_file_or_none() -> None:
    budget = snapshot.SMALL_MAP_BUDGET
    assert snapshot.map_bytes(budget // 4, 4) == budget // 4
    assert snapshot.map_bytes(budget // 4 + 1, 4) == 0
    assert snapshot.map_bytes(budget, 0) == budget   # no workers: the one connection
    assert snapshot.map_bytes(budget + 1, 1) == 0


class _NoSpareDescriptor:
    """A read-ahead the system cannot give a descriptor to (EMFILE), as a full process would."""

    closed = 0

    def __init__(self, budget: int) -> None:
        pass

    def add(self, fd: int, size: int, gate: object | None = None) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    def close(self) -> None:
        _NoSpareDescriptor.closed += 1


def test_a_read_ahead_that_cannot_start_leaves_the_check_as_it_would_be(
        ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = check_ledger(ledger, verify_bodies=True).to_json()
    monkeypatch.setattr(snapshot._archive, "ReadAhead", _NoSpareDescriptor)
    got = check_ledger(ledger, verify_bodies=True)
    assert got.sound and got.to_json() == want
    assert _NoSpareDescriptor.closed >= 1   # stopped, not left half started
