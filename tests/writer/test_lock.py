"""The writer lock: one writer per ledger, even when someone deletes the lock file.

A writer holds Capsem's flock on ``session.db-writer.lock`` and one on the ledger directory,
and checks at each flush that the lock file is still the one it locked. Concurrency is shown
with a real second process, driven line by line over its stdin and stdout, never by sleeping.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from capsem_core import format as fmt
from capsem_core.check import check_ledger
from capsem_core.errors import LedgerError, SymlinkRefused, WriterBusy, WriterLockLost
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

SRC = Path(__file__).resolve().parents[2] / "src"
LOCK = "session.db-writer.lock"
T0 = 1_750_000_000.0

# The child writer: "insert N" buffers row N with a body, "flush" and "close" run those;
# each command answers one line, "ok" or the exception's class and message.
CHILD = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(SRC)!r})
    from capsem_core.writer import Body, LedgerWriter
    writer = LedgerWriter(sys.argv[1])
    print("held", flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        try:
            if cmd == "insert":
                i = int(arg[0])
                writer.insert("net_events", {{"event_id": f"{{i:012x}}", "timestamp": "2025-06-15T15:06:40.000000Z",
                                             "domain": "example.com", "decision": "allowed"}},
                              [Body("request", b"body %d " % i * 50, "http.request")])
            elif cmd == "flush":
                writer.flush()
            elif cmd == "close":
                writer.close()
            print("ok", flush=True)
        except Exception as e:
            print(type(e).__name__, str(e).replace(chr(10), " "), flush=True)
""")


def net_row(i: int) -> dict[str, object]:
    return {"event_id": f"{i:012x}", "timestamp": "2025-06-15T15:06:40.000000Z", "domain": "example.com",
            "decision": "allowed"}


class Child:
    """A writer in another process, holding ``directory`` from start until close."""

    def __init__(self, directory: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "held"

    def __call__(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def end(self) -> None:
        self.proc.communicate("", timeout=60)


@pytest.fixture
def child(tmp_path):
    started: list[Child] = []

    def start(directory: Path) -> Child:
        started.append(Child(directory))
        return started[-1]

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.end()


def committed_events(directory: Path) -> list[str]:
    with Ledger(directory) as ledger:
        return sorted(e.event_id for e in ledger.events(["net_events"], limit=1000).events)


def assert_sound(directory: Path) -> None:
    report = check_ledger(directory / "session.db", verify_bodies=True)
    assert report.sound, report


# --- one writer -------------------------------------------------------------------------------

def test_a_second_writer_is_refused_while_another_process_writes(tmp_path, child):
    first = child(tmp_path)
    with pytest.raises(WriterBusy, match="already has a writer"):
        LedgerWriter(tmp_path, lock_timeout=0)
    assert first("insert 1") == "ok" and first("close") == "ok"
    LedgerWriter(tmp_path, lock_timeout=0).close()


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path, child):
    first = child(tmp_path)
    assert first("insert 1") == "ok" and first("flush") == "ok"
    (tmp_path / LOCK).unlink()
    with pytest.raises(WriterBusy, match="already has a writer"):
        LedgerWriter(tmp_path, lock_timeout=0)
    assert not (tmp_path / LOCK).exists()
    assert first("close").startswith("WriterLockLost")
    first.end()
    assert committed_events(tmp_path) == ["000000000001"]
    assert_sound(tmp_path)


def test_in_one_process_a_deleted_lock_file_still_keeps_a_second_writer_out(tmp_path):
    writer = LedgerWriter(tmp_path)
    (tmp_path / LOCK).unlink()
    with pytest.raises(WriterBusy, match="already has a writer"):
        LedgerWriter(tmp_path, lock_timeout=0)
    assert not (tmp_path / LOCK).exists()  # the refused writer touched nothing
    with pytest.raises(WriterLockLost, match="was deleted"):
        writer.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_writer_whose_lock_file_went_refuses_its_next_flush_and_writes_nothing(tmp_path, child, how):
    first = child(tmp_path)
    assert first("insert 1") == "ok" and first("flush") == "ok"
    (tmp_path / LOCK).unlink()
    if how == "replaced":
        (tmp_path / LOCK).write_bytes(b"")
    archive = (tmp_path / "session.bodies").read_bytes()
    assert first("insert 2") == "ok"
    answer = first("flush")
    assert answer.startswith("WriterLockLost") and f"was {how}" in answer and "before writing another byte" in answer
    assert first("flush").startswith("WriterLockLost")  # it stays stopped
    assert first("close").startswith("WriterLockLost")
    first.end()
    assert (tmp_path / "session.bodies").read_bytes() == archive
    assert committed_events(tmp_path) == ["000000000001"]
    assert_sound(tmp_path)
    LedgerWriter(tmp_path, lock_timeout=0).close()  # the ledger is free again once that writer is gone


def test_an_insert_that_would_close_a_block_after_the_lock_went_is_refused(tmp_path):
    now = [T0]
    writer = LedgerWriter(tmp_path, clock=lambda: now[0])
    writer.insert("net_events", net_row(1), [Body("request", b"first body " * 40, "http.request")])
    writer.flush()
    archive = (tmp_path / "session.bodies").read_bytes()
    (tmp_path / LOCK).unlink()
    now[0] += fmt.MAX_BLOCK_AGE_SECONDS  # the open block is due to close at the next body
    with pytest.raises(WriterLockLost, match="was deleted"):
        writer.insert("net_events", net_row(2), [Body("request", b"second body " * 40, "http.request")])
    with pytest.raises(WriterLockLost):
        writer.close()
    assert writer.closed and (tmp_path / "session.bodies").read_bytes() == archive
    assert committed_events(tmp_path) == ["000000000001"]
    assert_sound(tmp_path)


def test_writer_busy_says_the_lock_is_never_stale_and_must_not_be_deleted(tmp_path):
    with LedgerWriter(tmp_path):
        with pytest.raises(WriterBusy) as info:
            LedgerWriter(tmp_path, lock_timeout=0)
    text = info.value.detail
    assert f"ledger {tmp_path} already has a writer" in text and "exactly one writer" in text
    assert "released by the kernel" in text and "never stale: do not delete it" in text
    assert info.value.path == tmp_path / "session.db"


@pytest.mark.parametrize("timeout", ["float('nan')", "-1", "'1'", "None"])
def test_a_lock_timeout_that_is_no_wait_is_refused_before_anything_is_made(tmp_path, timeout):
    """NaN compares false with every deadline: a busy ledger was waited on for ever. Run in a
    child process, so that a wait that never ends fails the test rather than hanging it."""
    held = LedgerWriter(tmp_path / "held")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(SRC)!r})
        from capsem_core.writer import LedgerWriter
        for directory in sys.argv[1:]:
            try:
                LedgerWriter(directory, lock_timeout={timeout})
            except (TypeError, ValueError) as e:
                print(type(e).__name__, e)
        """)
    try:
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "held"), str(tmp_path / "new")],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        held.close()
    assert out.count("lock_timeout must be") == 2, out
    assert not (tmp_path / "new").exists()


def test_writer_lock_lost_is_a_writer_busy():
    assert issubclass(WriterLockLost, WriterBusy) and issubclass(WriterLockLost, LedgerError)


def test_readers_never_need_the_lock(tmp_path, child):
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1))
    first = child(tmp_path)
    assert committed_events(tmp_path) == ["000000000001"]
    assert_sound(tmp_path)
    assert first("close") == "ok"


# --- which path names a ledger ----------------------------------------------------------------

@pytest.mark.parametrize("exists", [True, False])
def test_a_writer_takes_the_session_db_path_as_naming_its_ledger(tmp_path, exists):
    ledger = tmp_path / "L"
    if exists:
        LedgerWriter(ledger).close()
    with LedgerWriter(ledger / "session.db") as w:
        assert w.directory == ledger and w.db_path == ledger / "session.db"
        w.insert("net_events", net_row(7), [Body("request", b"seven", "http.request")])
    assert sorted(p.name for p in ledger.iterdir()) == ["session.bodies", "session.db", LOCK]
    assert committed_events(ledger) == ["000000000007"]
    with Ledger(ledger / "session.db") as reader:
        assert reader.read_body("000000000007", "net_events", "request") == b"seven"


@pytest.mark.parametrize("via_db", [False, True])
def test_a_symlinked_ledger_directory_is_refused_with_the_readers_error(tmp_path, via_db):
    real = tmp_path / "real"
    LedgerWriter(real).close()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    before = sorted(real.iterdir())
    path = link / "session.db" if via_db else link
    with pytest.raises(SymlinkRefused) as writer_error:
        LedgerWriter(path)
    with pytest.raises(SymlinkRefused) as reader_error:
        check_ledger(link / "session.db")
    expected = f"{link}: refusing a session directory that is a symbolic link"
    assert str(writer_error.value) == str(reader_error.value) == expected
    assert sorted(real.iterdir()) == before


def test_a_dangling_symlinked_directory_is_refused_and_nothing_is_created(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere", target_is_directory=True)
    with pytest.raises(SymlinkRefused, match="session directory"):
        LedgerWriter(link)
    assert not (tmp_path / "nowhere").exists()


def test_an_empty_path_is_refused_and_nothing_is_written_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="is empty"):
        LedgerWriter("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["session.db", "session.bodies"])
def test_a_symlinked_ledger_file_is_refused_with_the_readers_error(tmp_path, name):
    LedgerWriter(tmp_path / "real").close()
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / name).symlink_to(tmp_path / "real" / name)
    with pytest.raises(SymlinkRefused) as info:
        LedgerWriter(ledger)
    assert str(info.value) == f"{ledger / name}: {name} is a symlink; a ledger file must be a regular file"


def test_a_ledger_path_that_is_a_file_is_a_ledger_error_not_an_os_error(tmp_path):
    (tmp_path / "plain").write_bytes(b"")
    with pytest.raises(LedgerError, match="cannot create the ledger directory"):
        LedgerWriter(tmp_path / "plain")
