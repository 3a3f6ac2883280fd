"""Read-only evidence: a ledger (and a home) on storage the reader cannot write reads in full,
and nothing there is created or changed.

Two media, each run by the identity that cannot write it:

* an unwritable directory (chmod 555, files 444) read by uid 65534 through ``setpriv`` (a
  non-root run of the suite is already unprivileged and runs the commands directly);
* a read-only bind mount (``mount --bind`` then ``remount,bind,ro``) read by root, whom no
  permission bit stops but the mount does.

A medium that cannot be set up here (no setpriv, mount not permitted) is skipped with the
reason. Every test compares a listing, modes, sizes, mtimes, ctimes and sha256 of every file
before and after, and compares what was read with what a writable copy of the same files reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.reliability_helpers import net_row

from capsem_core import db, sessions
from capsem_core.writer import Body, LedgerWriter

NOBODY = 65534
SESSION_ID = "20261201-090000-beef"
SRC = Path(__file__).resolve().parent.parent / "src" / "capsem_core"
NATIVE = SRC / "_native"

LEDGER_SNIPPET = r"""
import json, sys
from capsem_core.errors import LedgerError
from capsem_core.ledger import Ledger
try:
    with Ledger(sys.argv[1]) as ledger:
        ledger.ready()
        records = list(ledger.bodies())
        first = records[0]
        data = ledger.read_body(first.event_id, first.source_table, first.direction)
        verified, findings = ledger.verify()
        out = {"bodies": len(records), "read_body_matches": data == first.data,
               "body_bytes": sum(len(r.data) for r in records), "verified": verified,
               "findings": len(findings), "committed_extent": ledger.committed_extent()}
except LedgerError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
print(json.dumps(out))
"""

Runner = Callable[..., subprocess.CompletedProcess]


# --- helpers ----------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root (links not followed): mode, size, mtime, ctime and sha256."""
    snap: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name if name != "." else Path(dirpath)
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            snap[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest)
    return snap


def _chmod_tree(root: Path, dir_mode: int, file_mode: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            os.chmod(Path(dirpath) / name, file_mode)
        os.chmod(dirpath, dir_mode)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "capsem_core", *args]


def _run(argv: list[str], *, prefix: list[str] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120, cwd="/",
                          env=dict(os.environ, **(env or {})))


def write_sample(directory: Path, bodies: int = 300) -> None:
    """A sample ledger through the command line, as a user makes one (sample creates DIR
    itself, never its parents, as mkdir does)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    done = _run(_cli("sample", str(directory), "--bodies", str(bodies), "--seed", "3"))
    assert done.returncode == 0, done.stderr


def copy_alone(src: Path, dst: Path, names: tuple[str, ...] = ("session.db", "session.bodies")) -> Path:
    dst.mkdir(parents=True)
    for name in names:
        shutil.copyfile(src / name, dst / name)
    return dst


def check_json(result: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def base() -> Iterator[Path]:
    """A scratch directory every uid may traverse (pytest's tmp_path is root's alone)."""
    b = Path(tempfile.mkdtemp(prefix="capsem-ro-"))
    os.chmod(b, 0o755)
    yield b
    _chmod_tree(b, 0o755, 0o644)
    shutil.rmtree(b)


@pytest.fixture(scope="module")
def nobody_prefix() -> list[str]:
    """The command prefix that runs as an unprivileged uid (empty when we already are one)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv is missing: cannot run as an unprivileged uid to test permission bits")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = _run([sys.executable, "-c", "import capsem_core._native._index, capsem_core.ledger"], prefix=prefix)
    if probe.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot import capsem_core from this checkout: {probe.stderr.strip()[-200:]}")
    return prefix


@contextlib.contextmanager
def read_only_mount(src: Path) -> Iterator[Path]:
    """src bind-mounted read-only beside itself; skipped where mount is not permitted."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("mount/umount are missing")
    mnt = src.parent / (src.name + "-ro")
    mnt.mkdir()
    bind = subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"mount --bind is not permitted here: {bind.stderr.strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"remount,bind,ro is not permitted here: {ro.stderr.strip()}")
        # Root cannot write there: the medium, not a permission bit, refuses.
        with pytest.raises(OSError):
            (mnt / "probe").write_bytes(b"")
        assert os.statvfs(mnt).f_flag & os.ST_RDONLY
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        mnt.rmdir()


@contextlib.contextmanager
def on_medium(kind: str, src: Path, nobody: Callable[[], list[str]]) -> Iterator[tuple[Path, Runner]]:
    """src made unwritable (kind "dir": 555/444, read as uid 65534) or mounted read-only
    (kind "mount", read as root); yields the path to read and a runner for commands."""
    if kind == "dir":
        prefix = nobody()
        _chmod_tree(src, 0o555, 0o444)
        try:
            yield src, lambda argv, **kw: _run(argv, prefix=prefix, **kw)
        finally:
            _chmod_tree(src, 0o755, 0o644)
    else:
        with read_only_mount(src) as mnt:
            yield mnt, lambda argv, **kw: _run(argv, **kw)


MEDIA = [pytest.param("dir", id="unwritable-directory-as-uid-65534"),
         pytest.param("mount", id="read-only-bind-mount-as-root")]


@pytest.fixture
def nobody(request) -> Callable[[], list[str]]:
    return lambda: request.getfixturevalue("nobody_prefix")


def reference(base: Path, src: Path, *names: str) -> tuple[dict, dict]:
    """check --json and the Ledger snippet's answer on a writable copy of the same files."""
    ref = copy_alone(src, base / "reference", names or ("session.db", "session.bodies"))
    checked = check_json(_run(_cli("check", "--db", str(ref / "session.db"), "--json", "--verify-bodies")))
    read = _run([sys.executable, "-c", LEDGER_SNIPPET, str(ref)])
    assert read.returncode == 0, read.stderr
    return checked, json.loads(read.stdout)


# --- (a), (b): a ledger copied alone ------------------------------------------------------------

@pytest.mark.parametrize("kind", MEDIA)
def test_a_ledger_copied_alone_reads_in_full_and_nothing_there_changes(base, kind, nobody):
    write_sample(base / "sample")
    want_check, want_read = reference(base, base / "sample")
    evidence = copy_alone(base / "sample", base / "evidence")
    with on_medium(kind, evidence, nobody) as (d, run):
        before = snapshot(d)
        db_path = str(d / "session.db")
        for extra in ((), ("--verify-bodies",)):
            text = run(_cli("check", "--db", db_path, *extra))
            assert text.returncode == 0, (text.stdout[-2000:], text.stderr)
            assert text.stderr == "" and "Ledger sound." in text.stdout
        got = check_json(run(_cli("check", "--db", db_path, "--json", "--verify-bodies")))
        assert got["sound"] and got["exit_code"] == 0
        # The same report as a writable copy gives, check for check.
        assert got["checks"] == want_check["checks"]
        assert got["checks"]["verify_bodies"]["counts"]["verified"] == want_read["bodies"] > 0
        plain = check_json(run(_cli("check", "--db", db_path, "--json")))
        assert plain["exit_code"] == 0 and plain["checks"]["tables"] == want_check["checks"]["tables"]
        read = run([sys.executable, "-c", LEDGER_SNIPPET, str(d)])
        assert read.returncode == 0, read.stderr
        assert json.loads(read.stdout) == want_read
        assert want_read["read_body_matches"] and want_read["findings"] == 0
        assert snapshot(d) == before
        assert sorted(os.listdir(d)) == ["session.bodies", "session.db"]


@pytest.mark.parametrize("kind", MEDIA)
def test_a_rollback_journal_ledger_keeps_its_locks_on_read_only_media(base, kind, nobody):
    """No WAL to replay, so no immutable=1: SQLite's shared locks work on read-only media and
    keep a reader consistent with any writer the medium still has elsewhere."""
    write_sample(base / "sample", bodies=40)
    evidence = copy_alone(base / "sample", base / "evidence")
    conn = sqlite3.connect(evidence / "session.db")
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    conn.close()
    want_check, want_read = reference(base, evidence)
    with on_medium(kind, evidence, nobody) as (d, run):
        before = snapshot(d)
        plan = run([sys.executable, "-c", "import sys; from capsem_core import db; print(db.read_plan(sys.argv[1]).uri)",
                    str(d / "session.db")])
        assert plan.returncode == 0 and plan.stdout.strip().endswith("?mode=ro"), (plan.stdout, plan.stderr)
        got = check_json(run(_cli("check", "--db", str(d / "session.db"), "--json", "--verify-bodies")))
        assert got["exit_code"] == 0 and got["checks"] == want_check["checks"]
        read = run([sys.executable, "-c", LEDGER_SNIPPET, str(d)])
        assert read.returncode == 0 and json.loads(read.stdout) == want_read, read.stderr
        assert snapshot(d) == before


# --- (c): an un-checkpointed -wal on read-only media -----------------------------------------

def crash_image(base: Path, *, with_shm: bool, commits: int = 4) -> Path:
    """A ledger copied while its writer had committed rows only to the -wal (as a machine
    that lost power, or a copy taken mid-session, leaves it)."""
    live = base / "live"
    write_sample(live, bodies=120)
    image = base / "image"
    with LedgerWriter(live) as writer:
        for i in range(commits):
            eid = f"ee{i:010x}"
            writer.insert("net_events", net_row(eid), bodies=[Body("request", eid.encode() * 40, "http.request")])
            writer.flush()
        names = ["session.db", "session.db-wal", "session.bodies"] + (["session.db-shm"] if with_shm else [])
        copy_alone(live, image, tuple(names))
    wal = db.wal_state(image / "session.db-wal")
    # The premise, checked: the copy's -wal really holds commits the main file lacks.
    assert wal is not None and wal.commits >= commits, wal
    return image


def sqlite_net_events(image: Path, *, with_wal: bool) -> int:
    """net_events as plain SQLite counts them in a writable scratch copy of the image (with
    its -wal replayed, or of session.db alone), independent of capsem_core.db."""
    scratch = Path(tempfile.mkdtemp(prefix="capsem-ro-count-"))
    try:
        for name in ("session.db", "session.db-wal") if with_wal else ("session.db",):
            shutil.copyfile(image / name, scratch / name)
        conn = sqlite3.connect(scratch / "session.db")
        try:
            return conn.execute("SELECT COUNT(*) FROM net_events").fetchone()[0]
        finally:
            conn.close()
    finally:
        shutil.rmtree(scratch)


def _net_events(check: dict) -> int:
    return check["checks"]["tables"]["counts"]["net_events"]


@pytest.mark.parametrize("kind", MEDIA)
def test_a_wal_that_cannot_be_replayed_is_reported_never_silently_skipped(base, kind, nobody):
    image = crash_image(base, with_shm=False)
    with on_medium(kind, image, nobody) as (d, run):
        before = snapshot(d)
        wal = d / "session.db-wal"
        got = check_json(run(_cli("check", "--db", str(d / "session.db"), "--json", "--verify-bodies")))
        assert got["exit_code"] == 1 and not got["sound"]
        findings = [f for f in got["checks"]["tables"]["findings"] if f["code"] == "wal_not_read"]
        assert len(findings) == 1, got["checks"]["tables"]
        assert findings[0]["location"] == {"file": str(wal)} and str(wal) in findings[0]["message"]
        assert findings[0]["count"] >= 4
        # What it did read is session.db alone, and it says so: fewer rows than the WAL holds.
        assert _net_events(got) == sqlite_net_events(image, with_wal=False) == sqlite_net_events(image, with_wal=True) - 4
        text = run(_cli("check", "--db", str(d / "session.db")))
        assert text.returncode == 1 and str(wal) in text.stdout and "Traceback" not in text.stderr
        # The Ledger API refuses in one line naming the -wal.
        read = run([sys.executable, "-c", LEDGER_SNIPPET, str(d)])
        assert read.returncode == 1 and read.stdout == ""
        assert read.stderr.count("\n") == 1 and str(wal) in read.stderr and "-shm" in read.stderr, read.stderr
        assert read.stderr.count(str(wal)) == 1, read.stderr   # named once, as every error names its file
        assert snapshot(d) == before


@pytest.mark.parametrize("kind", MEDIA)
def test_a_wal_with_its_shm_on_read_only_media_is_read_in_full(base, kind, nobody):
    image = crash_image(base, with_shm=True)
    want_check, want_read = reference(base, image, "session.db", "session.db-wal", "session.bodies")
    with on_medium(kind, image, nobody) as (d, run):
        before = snapshot(d)
        got = check_json(run(_cli("check", "--db", str(d / "session.db"), "--json", "--verify-bodies")))
        assert got["exit_code"] == 0, got["checks"]["tables"]
        assert got["checks"] == want_check["checks"]
        # Every commit in the -wal was read: the count plain SQLite gives with the WAL replayed.
        assert _net_events(got) == sqlite_net_events(image, with_wal=True) == sqlite_net_events(image, with_wal=False) + 4
        read = run([sys.executable, "-c", LEDGER_SNIPPET, str(d)])
        assert read.returncode == 0, read.stderr
        assert json.loads(read.stdout) == want_read
        assert snapshot(d) == before


def test_a_live_session_another_user_cannot_write_is_read_with_every_commit(base, nobody_prefix):
    """A writer (root) still running in its directory (755: uid 65534 cannot write there)
    with commits only in its -wal: the reader follows its -shm read-only and sees them all."""
    live = base / "live"
    write_sample(live, bodies=60)
    with LedgerWriter(live) as writer:
        for i in range(3):
            eid = f"ef{i:010x}"
            writer.insert("net_events", net_row(eid), bodies=[Body("request", eid.encode() * 40, "http.request")])
            writer.flush()
        assert db.wal_state(live / "session.db-wal").commits >= 3
        os.chmod(live / "session.bodies", 0o644)
        before = sorted(os.listdir(live))
        got = check_json(_run(_cli("check", "--db", str(live / "session.db"), "--json", "--verify-bodies"),
                              prefix=nobody_prefix))
        assert got["exit_code"] == 0, got["checks"]["tables"]
        with sqlite3.connect(live / "session.db") as conn:
            total = conn.execute("SELECT COUNT(*) FROM net_events").fetchone()[0]
        conn.close()
        assert _net_events(got) == total
        assert got["checks"]["verify_bodies"]["counts"]["verified"] == got["checks"]["body_archive"]["counts"]["bodies"]
        # The live writer's files are its own to change; the reader created none beside them.
        assert sorted(os.listdir(live)) == before


# --- (d): list on a home whose main.db sits on read-only media --------------------------------

@pytest.mark.parametrize("kind", MEDIA)
def test_list_reads_a_home_on_read_only_media(base, kind, nobody):
    home = base / "home"
    h = sessions.Home(home, home / "run")
    write_sample(h.sessions_root / SESSION_ID, bodies=40)
    sessions.create_main_db(h.main_db)
    sessions.register_session(h.main_db, SESSION_ID)
    conn = sqlite3.connect(h.main_db)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    conn.close()
    with open(h.main_db, "rb") as f:
        assert f.read(20)[18:20] == b"\x02\x02"  # main.db is a WAL database, as Capsem writes it
    with on_medium(kind, home, nobody) as (d, run):
        before = snapshot(d)
        env = {"CAPSEM_HOME": str(d), "CAPSEM_RUN_DIR": str(d / "run")}
        for args in (("list",), ("list", "--json")):
            listed = run(_cli(*args), env=env)
            assert listed.returncode == 0, listed.stderr
            assert "Traceback" not in listed.stderr and SESSION_ID in listed.stdout
        latest = run(_cli("check", "--json"), env=env)
        assert check_json(latest)["session"] == SESSION_ID and latest.returncode == 0, latest.stderr
        # rollup writes main.db: it cannot here, and says so rather than calling it unreadable.
        rolled = run(_cli("rollup", SESSION_ID), env=env)
        assert rolled.returncode == 1 and rolled.stderr.count("\n") == 1, rolled.stderr
        assert "cannot write main.db" in rolled.stderr and "read-only" in rolled.stderr, rolled.stderr
        assert snapshot(d) == before


@pytest.mark.parametrize("kind", MEDIA)
def test_a_fifo_where_a_wal_belongs_on_read_only_media_is_refused_never_waited_on(base, kind, nobody):
    """On read-only media the plan reads the -wal's frame headers itself; a FIFO there blocked
    that open until a writer came (check and check --all hung). It is refused in one
    line naming it; the timeout of ``_run`` only keeps a regression from hanging the suite."""
    home = base / "home"
    h = sessions.Home(home, home / "run")
    ledger = h.sessions_root / SESSION_ID
    write_sample(ledger, bodies=10)
    sessions.create_main_db(h.main_db)
    sessions.register_session(h.main_db, SESSION_ID)
    conn = sqlite3.connect(ledger / "session.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for sidecar in ("session.db-wal", "session.db-shm"):
        (ledger / sidecar).unlink(missing_ok=True)
    os.mkfifo(ledger / "session.db-wal")
    with on_medium(kind, home, nobody) as (d, run):
        before = snapshot(d)
        env = {"CAPSEM_HOME": str(d), "CAPSEM_RUN_DIR": str(d / "run")}
        wal = d / "run" / "sessions" / SESSION_ID / "session.db-wal"
        for args in (("check", "--db", str(wal.parent / "session.db")), ("check", SESSION_ID)):
            done = run(_cli(*args), env=env)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done
            assert f"{wal}: not a regular file" in done.stdout + done.stderr, done
        assert snapshot(d) == before


# --- the plan itself ----------------------------------------------------------------------------

def test_a_writable_directory_keeps_sqlites_ordinary_reader(tmp_path):
    write_sample(tmp_path / "s", bodies=10)
    plan = db.read_plan(tmp_path / "s" / "session.db")
    assert not plan.immutable and plan.uri.endswith("?mode=ro") and plan.unread_wal is None


def test_uris_keep_every_path_character_a_path_character(tmp_path):
    odd = tmp_path / "a?b#c%d e"
    write_sample(odd, bodies=10)
    plan = db.read_plan(odd / "session.db")
    assert "?" not in plan.uri.split("?mode=")[0].removeprefix("file:")
    conn = db.connect_readonly(odd / "session.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0] > 0
    finally:
        conn.close()


def test_wal_state_counts_the_current_generation_only(tmp_path):
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t(a)")
    for i in range(3):
        conn.execute("INSERT INTO t VALUES (?)", (i,))
    assert db.wal_state(Path(f"{path}-wal")).commits == 4
    # A checkpoint that restarts the log leaves old frames behind new salts: none count.
    conn.execute("PRAGMA wal_checkpoint(RESTART)")
    conn.execute("INSERT INTO t VALUES (9)")
    assert db.wal_state(Path(f"{path}-wal")).commits == 1
    conn.close()
    assert db.wal_state(Path(f"{path}-wal")) is None
    assert db.wal_state(tmp_path / "absent-wal") is None


# --- access times -------------------------------------------------------------------------------

DAY_NS = 86_400 * 10**9


def _aged(path: Path) -> int:
    """Set the file's access time two days before its modification time (relatime then
    updates it on the next read); returns that access time."""
    st = os.stat(path)
    atime = st.st_mtime_ns - 2 * DAY_NS
    os.utime(path, ns=(atime, st.st_mtime_ns))
    return atime


def _reads_update_access_times(directory: Path) -> bool:
    """Whether a plain read updates an aged file's access time on this filesystem (a noatime
    mount never does: nothing to keep there) and O_NOATIME may be set on a file made here."""
    control = directory / "control.bin"
    control.write_bytes(b"x" * 4096)
    atime = _aged(control)
    with open(control, "rb") as f:
        f.read()
    if os.stat(control).st_atime_ns == atime:
        return False
    # The flag itself: refused for a file of another owner, or by a filesystem that will not.
    import fcntl

    fd = os.open(control, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NOATIME)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="O_NOATIME is Linux's")
def test_a_read_only_connections_page_reads_leave_the_access_time_as_it_was(tmp_path):
    write_sample(tmp_path / "s", bodies=50)
    if not _reads_update_access_times(tmp_path):
        pytest.skip("reads do not update access times here, or O_NOATIME is refused")
    path = tmp_path / "s" / "session.db"
    conn = db.connect_readonly(path)
    try:
        # Aged once open: SQLite reads the header while opening, before the flag is set.
        atime = _aged(path)
        assert conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0] > 0
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]   # every page
    finally:
        conn.close()
    assert os.stat(path).st_atime_ns == atime


def test_a_ledger_whose_access_time_may_not_be_kept_is_read_all_the_same(tmp_path, monkeypatch):
    import fcntl

    write_sample(tmp_path / "s", bodies=10)
    real = fcntl.fcntl

    def refused(fd, cmd, *args):  # type: ignore[no-untyped-def]
        if cmd == fcntl.F_SETFL:
            raise PermissionError(1, "Operation not permitted")   # what a file of another owner gets
        return real(fd, cmd, *args)

    monkeypatch.setattr(fcntl, "fcntl", refused)
    conn = db.connect_readonly(tmp_path / "s" / "session.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0] > 0
    finally:
        conn.close()


# --- (e): one owner of connections --------------------------------------------------------------

def test_every_connection_comes_from_db_py():
    sources = sorted([*SRC.rglob("*.py"), *NATIVE.rglob("*.pyx"), *NATIVE.rglob("*.pxd")])
    assert SRC / "db.py" in sources and NATIVE / "index" / "_index.pyx" in sources
    pattern = re.compile(r"sqlite3\s*\.\s*connect\s*\(|\bconnect\s*=\s*sqlite3|from\s+sqlite3\s+import[^\n]*\bconnect\b")
    offenders = [f"{p.relative_to(SRC.parent.parent)}:{n}" for p in sources if p.name != "db.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == [], "open SQLite through capsem_core.db, not sqlite3.connect: " + ", ".join(offenders)
    assert pattern.search((SRC / "db.py").read_text())  # the pattern does find a connect
    # The native scans (the body index's, the column reader's) open only the URI db.py hands
    # them, read-only, with URI parsing on.
    c_sources = {p.name: p.read_text() for p in NATIVE.rglob("*.c")}
    opens = {name: re.findall(r"sqlite3_open\w*\s*\(([^;]*)\)", text) for name, text in c_sources.items()}
    opens = {name: calls for name, calls in opens.items() if calls}
    assert sorted(opens) == ["index_scan.c", "scan_stream.c"], opens
    assert all("SQLITE_OPEN_URI" in call and "SQLITE_OPEN_READONLY" in call for calls in opens.values()
               for call in calls)
