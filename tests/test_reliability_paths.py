"""Paths: session ids and names that escape the run directory, symlinked ledger files and
session directories, and unreadable files and directories. Each is refused with a clear
error naming what was refused, and nothing on disk changes (every path under the home and
beside it keeps its listing, mode, size, mtime and bytes).

Tests run as root in CI, where permission bits do not stop reads: the unreadable cases run
in a forked child that drops to an unprivileged uid, and are skipped (with the reason) where
that is impossible.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests.reliability_helpers import tree_snapshot as _tree_snapshot
from tests.reliability_helpers import write_tiny

from capsem_core import sessions
from capsem_core.check import check_ledger
from capsem_core.errors import LedgerError, LedgerWarning, SymlinkRefused
from capsem_core.ledger import Ledger
from capsem_core.writer import LedgerWriter

SESSION_ID = "20261130-120000-abcd"

# main.db is in WAL mode, as Capsem keeps it: SQLite itself creates main.db-wal and -shm (and
# so touches their directory) on a read-only open, as in any live Capsem home. Those are not
# writes of ours; everything else must stay byte-for-byte the same.
_WAL_SIDECARS = ("main.db-wal", "main.db-shm")


def tree_snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    snap = _tree_snapshot(root)
    for key in list(snap):
        if key.endswith(_WAL_SIDECARS) or key.endswith("/sessions") and key.count("/") == 1:
            del snap[key]
    return snap
ESCAPING_WORDS = ("..", ".", "../outside", "../../outside", "/etc", "/tmp", "a/b", "a\\b", "sessions/../..",
                  "-rf", ".hidden", "x\0y", "", "a" * 300, "..\\..\\outside", "~root", "$HOME", "*")


@pytest.fixture
def home(tmp_path) -> Path:
    """A Capsem home with one registered session and, beside it, a ledger an escape could reach."""
    h = tmp_path / "home"
    write_tiny(h / "run" / "sessions" / SESSION_ID)
    sessions.register_session(sessions.Home(h, h / "run").main_db, SESSION_ID)
    write_tiny(tmp_path / "outside")
    write_tiny(h / "run" / "outside")
    return h


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CAPSEM_HOME=str(home), CAPSEM_RUN_DIR=str(home / "run"))
    return subprocess.run([sys.executable, "-m", "capsem_core", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_ids_and_names_that_escape_the_run_directory_are_refused_and_nothing_is_written(home):
    root = home.parent
    before = tree_snapshot(root)
    for word in ESCAPING_WORDS:
        with pytest.raises(LedgerError, match="refusing session") as info:
            sessions.resolve_session(word, home=home)
        assert repr(word) in str(info.value)
    # The command line refuses each as a usage error, without a traceback.
    for word in ("../outside", "/etc", "a/b", ".."):
        proc = run_cli(home, "check", "--", word)
        assert proc.returncode == 2, proc
        assert "cannot name a session" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert tree_snapshot(root) == before


def test_main_db_rows_naming_an_escaping_directory_are_refused(home):
    main_db = sessions.Home(home, home / "run").main_db
    conn = sqlite3.connect(main_db)
    with conn:
        conn.execute("INSERT INTO sessions (id, mode, status, created_at, storage_mode) "
                     "VALUES ('victim', 'cli', 'stopped', '2099-01-01T00:00:00.000Z', 'block')")
        conn.execute("INSERT INTO sessions (id, mode, status, created_at, storage_mode) "
                     "VALUES ('../outside', 'cli', 'stopped', '2098-01-01T00:00:00.000Z', 'block')")
    conn.close()
    # A hostile name link is dropped (with a warning), never followed.
    (main_db.parent / "capsem-core-vm-names.json").write_text(json.dumps(
        {"format": "capsem-core-vm-names", "version": 1, "names": {"../../outside": "victim"}}))
    before = tree_snapshot(home.parent)
    with pytest.warns(LedgerWarning, match="ignoring 1 VM name link"), \
            pytest.raises(LedgerError, match="session.db not found for victim"):
        sessions.resolve_session("victim", home=home)
    conn = sqlite3.connect(main_db)
    with conn:
        conn.execute("UPDATE sessions SET created_at = '2100-01-01T00:00:00.000Z' WHERE id = '../outside'")
    conn.close()
    before = tree_snapshot(home.parent)
    with pytest.warns(LedgerWarning, match="ignoring 1 VM name link"), \
            pytest.raises(LedgerError, match="cannot name a directory"):
        sessions.resolve_session(None, home=home)   # the latest row is the escaping one
    proc = run_cli(home, "check")
    assert proc.returncode == 1 and "cannot name a directory" in proc.stderr and "Traceback" not in proc.stderr
    assert tree_snapshot(home.parent) == before



def test_symlinked_session_directories_and_ledger_files_are_refused(home, tmp_path):
    run = home / "run" / "sessions"
    (run / "linked-dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    files = run / "linked-files"
    files.mkdir()
    for name in ("session.db", "session.bodies"):
        (files / name).symlink_to(tmp_path / "outside" / name)
    only_bodies = run / "linked-bodies"
    write_tiny(only_bodies)
    (only_bodies / "session.bodies").unlink()
    (only_bodies / "session.bodies").symlink_to(tmp_path / "outside" / "session.bodies")
    # The doctor reports an archive that is a link as damage, and never reads through it.
    # (It is a reader, not a refusal: SQLite may create the -wal/-shm sidecars of session.db.)
    report = check_ledger(only_bodies / "session.db", verify_bodies=True)
    codes = {f.code for c in report.checks.values() for f in c.findings}
    assert not report.sound and "archive_not_regular" in codes
    before = tree_snapshot(tmp_path)

    with pytest.raises(SymlinkRefused, match="symbolic link"):
        sessions.resolve_session("linked-dir", home=home)
    with pytest.raises(SymlinkRefused, match="symbolic link"):
        sessions.resolve_session("linked-files", home=home)
    for directory in (run / "linked-dir", files, only_bodies):
        with pytest.raises(SymlinkRefused) as info:
            Ledger(directory)
        assert info.value.path.parent in (directory, run)
        with pytest.raises(SymlinkRefused):
            LedgerWriter(files)
    for word in ("linked-dir", "linked-files"):
        proc = run_cli(home, "check", word)
        assert proc.returncode == 1 and "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    assert tree_snapshot(tmp_path) == before


def test_a_writer_refuses_a_symlinked_archive_or_lock_and_leaves_the_target_alone(tmp_path):
    target = tmp_path / "target"
    write_tiny(target)
    for name in ("session.bodies", "session.db-writer.lock"):
        d = tmp_path / f"link-{name}"
        write_tiny(d)
        (d / name).unlink()
        (d / name).symlink_to(target / name)
        before = tree_snapshot(tmp_path)
        with pytest.raises(SymlinkRefused, match="symlink") as info:
            LedgerWriter(d)
        assert info.value.path == d / name
        assert tree_snapshot(tmp_path) == before


# --- unreadable files and directories ---------------------------------------------------------

def _unprivileged_ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    if not hasattr(os, "fork") or not hasattr(os, "setuid"):
        return None
    return 65534, 65534


def _as(ids: tuple[int, int], fn) -> dict:
    """Run ``fn()`` in a forked child with the given uid/gid; its JSON-able result comes back."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(ids[1])
                os.setuid(ids[0])
            result = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            result = {"unexpected": f"{type(e).__name__}: {e}"}
        os.write(wfd, json.dumps(result).encode())
        os._exit(0)
    os.close(wfd)
    chunks = []
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b"{}")


def _try_every_reader(directory: Path) -> dict:
    out = {}
    for name, fn in (("ledger", lambda: Ledger(directory).close()),
                     ("check", lambda: check_ledger(directory / "session.db", verify_bodies=True).sound)):
        try:
            out[name] = {"ok": fn()}
        except LedgerError as e:
            out[name] = {"error": type(e).__name__, "path": str(e.path), "message": str(e)}
    from capsem_core import cli
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        out["cli"] = {"code": cli.main(["check", "--db", str(directory / "session.db"), "--verify-bodies"]),
                      "stderr": err.getvalue()}
    return out


@pytest.fixture
def shared_ledger():
    """A ledger any uid may read (rollback journal: no -wal/-shm the reader would need to write)."""
    ids = _unprivileged_ids()
    if ids is None:
        pytest.skip("running as root without fork/setuid: permission bits cannot be tested")
    base = Path(tempfile.mkdtemp(prefix="capsem-rel-perm-"))
    os.chmod(base, 0o755)
    d = base / "ledger"
    write_tiny(d)
    conn = sqlite3.connect(d / "session.db")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    for p in (d, *d.iterdir()):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    yield ids, d
    for p in (d, *d.iterdir()):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    import shutil

    shutil.rmtree(base)


def test_a_readable_ledger_reads_as_the_unprivileged_user(shared_ledger):
    ids, d = shared_ledger
    result = _as(ids, lambda: _try_every_reader(d))
    assert result["ledger"] == {"ok": None} and result["check"] == {"ok": True}, result
    assert result["cli"]["code"] == 0


@pytest.mark.parametrize("target", ["session.db", "session.bodies", "."])
def test_unreadable_files_and_directories_are_refused_naming_them_and_nothing_is_written(shared_ledger, target):
    ids, d = shared_ledger
    locked = (d / target).resolve()
    os.chmod(locked, 0)
    before = tree_snapshot(d.parent)
    result = _as(ids, lambda: _try_every_reader(d))
    os.chmod(locked, 0o755 if locked.is_dir() else 0o644)
    assert "unexpected" not in result, result
    assert "error" in result["ledger"], result
    named = Path(result["ledger"]["path"])
    assert named == locked or named.parent == locked, result["ledger"]
    # check either refuses (naming the file) or reports the archive as damage; never a traceback.
    assert result["check"].get("ok") is not True, result["check"]
    assert result["cli"]["code"] == 1 and "Traceback" not in result["cli"]["stderr"], result["cli"]
    assert result["cli"]["stderr"] == "" or str(d) in result["cli"]["stderr"], result["cli"]
    os.chmod(locked, 0)
    assert tree_snapshot(d.parent) == before
    os.chmod(locked, 0o755 if locked.is_dir() else 0o644)
    assert stat.S_IMODE(os.stat(locked).st_mode) != 0


def test_a_ledger_whose_path_is_not_utf8_is_read_checked_and_listed_by_its_bytes(tmp_path):
    """A directory name is bytes: one that is not UTF-8 reaches Python as surrogates, and
    the native scans took the path as UTF-8 text (a UnicodeEncodeError traceback)."""
    directory = os.fsdecode(os.fsencode(tmp_path) + b"/s\xffx")
    write_tiny(Path(directory))
    for args in (["events", "--db", directory], ["check", "--verify-bodies", "--db", directory]):
        done = subprocess.run([sys.executable, "-m", "capsem_core", *args], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    with Ledger(directory) as ledger:
        assert len(ledger.index()) > 0 and len(ledger.events().events) > 0


def test_open_regular_opens_a_file_and_refuses_a_fifo_a_directory_and_a_link(tmp_path: Path) -> None:
    """The one open of a small file beside a ledger: a regular file gives its descriptor and
    stat; a FIFO is refused at once (no writer is waited for) and a directory alike, each
    with its descriptor closed; a link is not followed unless asked."""
    import errno

    from capsem_core.paths import NotRegularFile, open_regular

    regular = tmp_path / "file"
    regular.write_bytes(b"twelve bytes")
    fd, st = open_regular(regular)
    try:
        assert st.st_size == 12 and os.read(fd, 100) == b"twelve bytes"
    finally:
        os.close(fd)
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for odd in (fifo, tmp_path):
        with pytest.raises(NotRegularFile, match="not a regular file"):
            open_regular(odd)
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
    link = tmp_path / "link"
    link.symlink_to(regular)
    with pytest.raises(OSError) as refused:
        open_regular(link)
    assert refused.value.errno == errno.ELOOP
    fd, st = open_regular(link, follow=True)
    os.close(fd)
    assert st.st_size == 12
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")
