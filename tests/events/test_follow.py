"""Following a ledger while another process writes it: every committed row exactly once, in id
order per table, whatever falls between the follower's pages; and the poll that waits reads
nothing until a commit."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

from capsem_core.ledger import Ledger
from oracles import live_writer
from tests.events.ledgers import all_rows, write_mixed

ROWS = 4000


def _start_writer(directory: Path, rows: int, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "oracles.live_writer", str(directory), "--rows", str(rows),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    return proc


def _check_exactly_once(directory: Path, seen: list[tuple[str, int]]) -> None:
    assert len(seen) == len(set(seen)), "a row was delivered twice"
    assert set(seen) == all_rows(directory), "a committed row was missed"
    for table in live_writer.TABLES:
        ids = [i for t, i in seen if t == table]
        assert ids == sorted(ids) and ids, table


def test_a_follower_paging_a_live_writer_gets_every_row_once_in_id_order(tmp_path: Path) -> None:
    proc = _start_writer(tmp_path, ROWS)
    seen: list[tuple[str, int]] = []
    pages = 0
    with Ledger(tmp_path) as ledger:
        after = "start"
        while True:
            finished = proc.poll() is not None
            page = ledger.events(after=after, limit=17)  # smaller than most of the writer's commits
            pages += 1
            seen += [(e.table, e.id) for e in page.events]
            after = page.cursor
            if finished and page.caught_up:
                break
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    assert len(seen) == ROWS and pages > ROWS // 17
    _check_exactly_once(tmp_path, seen)


def test_follow_yields_every_row_once_and_its_last_cursor_resumes_after_them(tmp_path: Path) -> None:
    proc = _start_writer(tmp_path, ROWS)
    seen: list[tuple[str, int]] = []
    cursor = "start"
    with Ledger(tmp_path) as ledger:
        stop = threading.Event()
        for page in ledger.follow(limit=50, poll=0.005, stop=stop.is_set):
            seen += [(e.table, e.id) for e in page.events]
            cursor = page.cursor
            if len(seen) >= ROWS:
                stop.set()
        assert proc.wait(timeout=60) == 0
        _check_exactly_once(tmp_path, seen)
        assert ledger.events(after=cursor).events == []
    write_mixed(tmp_path, 5, first=ROWS)  # the writer is gone: another takes the ledger
    with Ledger(tmp_path) as ledger:
        assert len(ledger.events(after=cursor).events) == 5


def test_a_caught_up_follower_reads_no_table_until_a_commit(tmp_path: Path) -> None:
    write_mixed(tmp_path, 10)
    with Ledger(tmp_path) as ledger:
        pages: list[int] = []
        reads = 0
        original = ledger._event_reader().page

        def counting(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            nonlocal reads
            reads += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        ledger._event_reader().page = counting  # type: ignore[method-assign]
        stop = threading.Event()

        def later() -> None:
            time.sleep(0.4)
            write_mixed(tmp_path, 4, first=10)
            time.sleep(0.4)
            stop.set()

        writer = threading.Thread(target=later)
        writer.start()
        for page in ledger.follow(poll=0.01, stop=stop.is_set):
            pages.append(len(page.events))
        writer.join()
    assert pages == [10, 4]
    # About 80 polls passed; the tables were read only for the first page and after the commit(s).
    assert reads <= 6


def test_a_follower_whose_ledger_is_removed_says_so_instead_of_waiting_forever(tmp_path: Path) -> None:
    import shutil

    import pytest

    from capsem_core.errors import LedgerError

    directory = tmp_path / "gone"
    write_mixed(directory, 10)
    polls = itertools.count()
    with Ledger(directory) as ledger:
        # Should the removal go unseen, the follower stops after many polls (a count, not a
        # clock): the test then fails on StopIteration instead of hanging.
        pages = ledger.follow(limit=50, poll=0.001, stop=lambda: next(polls) > 20_000)
        assert len(next(pages).events) == 10   # caught up: the next page waits on a commit
        shutil.rmtree(directory)
        with pytest.raises(LedgerError, match="removed or replaced while it was followed"):
            next(pages)


def test_the_command_line_follower_of_a_removed_ledger_ends_in_one_line_with_its_cursor(tmp_path: Path) -> None:
    import shutil

    directory = tmp_path / "gone"
    write_mixed(directory, 10)
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", "events", "--db", str(directory), "--follow",
                             "--jsonl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    lines = [proc.stdout.readline() for _ in range(10)]   # every event is out: it waits now
    assert all(line.startswith("{") for line in lines)
    shutil.rmtree(directory)
    try:   # a follower that misses the removal would wait forever: end it, and fail
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the follower of a removed ledger was still waiting after 600 s") from None
    assert proc.returncode == 1
    assert err.startswith("cursor: ev1.") and err.count("\n") == 2 and "removed or replaced" in err, err
