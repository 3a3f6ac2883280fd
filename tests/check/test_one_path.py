"""One path per job (issue 11): ``check --verify-bodies`` opens session.db once per scanning
thread and session.bodies once, and reports the same as the path that opens its own.

The open counts are read off ``strace -f -e trace=openat,open`` of the real command: the
checks' connection (whose read transaction the SQL checks, the native index scans and the
labels share), one connection per page-check thread and the page map's read-only map are
the only opens of session.db, and one ArchiveReader serves the file-header check, the extent
walk and the verify kernel.
``CAPSEM_CORE_SHARE_CONNECTION=0`` forces the fallback (the scans open their own
connection from the URI): its report must be the same.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import db as _db
from tests import scans as index
from capsem_core._native import _index
from capsem_core.sample import write_sample_ledger


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    summary = write_sample_ledger(tmp_path_factory.mktemp("onepath") / "sess-one", seed=11, bodies=400)
    db = summary.directory / "session.db"
    # A checkpointed ledger with no sidecars: every count below is of the files themselves.
    for sidecar in ("-wal", "-shm"):
        Path(str(db) + sidecar).unlink(missing_ok=True)
    return db


def _check(db: Path, *extra: str, env: dict[str, str] | None = None, strace: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "capsem_core", "check", "--db", str(db), "--verify-bodies", "--json", *extra]
    if strace is not None:
        cmd = ["strace", "-f", "-qq", "-e", "trace=openat,open", "-o", str(strace), *cmd]
    full = dict(os.environ, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=300)


def _opens(trace: Path, target: Path) -> list[str]:
    """The successful open/openat calls of exactly ``target`` in an strace log."""
    return _opens_in(trace.read_text(), target)


def _cleanup(db: Path) -> None:
    # A read-only check of a WAL ledger leaves SQLite's sidecars; the next run starts without.
    for sidecar in ("-wal", "-shm"):
        Path(str(db) + sidecar).unlink(missing_ok=True)


def _strace_can_trace() -> bool:
    """False where ptrace is missing: under qemu-user (scripts/test-arm64) strace starts but
    cannot trace anything."""
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-qq", "-o", os.devnull, sys.executable, "-c", "pass"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (scripts/setup installs it)")
@pytest.mark.skipif(not _strace_can_trace(), reason="strace cannot trace here (no ptrace: qemu-user emulation)")
def test_verify_bodies_opens_session_db_once_per_scanning_thread_and_session_bodies_once(
        sample: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    _cleanup(sample)
    shared = _check(sample, strace=trace)
    assert shared.returncode == 0, shared.stdout + shared.stderr
    db_opens = _opens(trace, sample)
    bodies_opens = _opens(trace, sample.with_suffix(".bodies"))
    # 400 bodies are far below PARALLEL_MIN_ROWS: the scan has one reader, so no extra
    # scan thread opens a connection of its own.
    pages = json.loads(shared.stdout)["checks"]["pages"]["counts"]
    assert pages["method"] == "per_table"
    assert len(db_opens) == 1 + pages["threads"] + 1, "\n".join(db_opens)
    assert len(bodies_opens) == 1, "\n".join(bodies_opens)

    _cleanup(sample)
    fallback = _check(sample, env={"CAPSEM_CORE_SHARE_CONNECTION": "0"}, strace=trace)
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    # The fallback opens its own connection per scan: the switch does change the path.
    assert len(_opens(trace, sample)) > 2
    assert json.loads(shared.stdout) == json.loads(fallback.stdout)
    _cleanup(sample)


def test_the_shared_and_the_fallback_path_report_the_same_damage(sample: Path, tmp_path: Path) -> None:
    broken = tmp_path / "sess-broken"
    shutil.copytree(sample.parent, broken)
    db = broken / "session.db"
    # One body's recorded hash no longer matches its bytes: a verify finding labelled
    # through the checks' connection on one path and through the same text on the other.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE event_body_blobs SET body_hash = 'blake3:' || printf('%064d', 0) "
                     "WHERE id = (SELECT MIN(id) FROM event_body_blobs)")
    conn.close()
    _cleanup(db)
    shared = _check(db)
    _cleanup(db)
    fallback = _check(db, env={"CAPSEM_CORE_SHARE_CONNECTION": "0"})
    assert shared.returncode == fallback.returncode == 1, shared.stdout + shared.stderr
    report = json.loads(shared.stdout)
    assert report == json.loads(fallback.stdout)
    findings = report["checks"]["verify_bodies"]["findings"]
    assert [f["code"] for f in findings] == ["body_hash"], findings
    # Labelled through the checks' connection: the row's event, not just its id.
    assert findings[0]["location"]["event_id"] is not None, findings


# --- the handle extraction ------------------------------------------------------------------------

def _conn(path: Path) -> sqlite3.Connection:
    return _db.connect_readonly(path, allow_unread_wal=True)


def test_a_connection_to_the_ledger_itself_is_borrowed(sample: Path) -> None:
    conn = _conn(sample)
    try:
        assert _index.connection_shareable(conn, str(sample)) is True
        conn.execute("BEGIN")
        shared = index.scan_bodies(sample, plan=_db.read_plan(sample), conn=conn)
        # The scan ran inside the caller's transaction and left it open.
        assert conn.in_transaction
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    own = index.scan_bodies(sample, plan=_db.read_plan(sample))
    assert shared.keys() == own.keys()
    for key in own:
        assert (shared[key] == own[key]).all(), key


def test_a_connection_to_another_file_a_closed_one_or_a_subclass_is_refused(sample: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    shutil.copyfile(sample, other)
    conn = _conn(other)
    try:
        # Same contents, another file: refused, and the scan falls back to the URI (correct
        # either way: it reads the ledger's own rows).
        assert _index.connection_shareable(conn, str(sample)) is False
        want = index.scan_bodies(sample, plan=_db.read_plan(sample))["id"]
        assert (index.scan_bodies(sample, plan=_db.read_plan(sample), conn=conn)["id"] == want).all()
    finally:
        conn.close()
    closed = _conn(sample)
    closed.close()
    assert _index.connection_shareable(closed, str(sample)) is False

    class Mine(sqlite3.Connection):
        pass

    sub = sqlite3.connect(sample, factory=Mine)
    try:
        assert _index.connection_shareable(sub, str(sample)) is False
    finally:
        sub.close()
    assert _index.connection_shareable(object(), str(sample)) is False
    assert _index.connection_shareable(None, str(sample)) is False


# --- Ledger.verify on the one path ----------------------------------------------------------------

_VERIFY_AFTER_OPEN = """
import sys
from capsem_core.ledger import Ledger
ledger = Ledger(sys.argv[1])
print("opened", flush=True)
sys.stdout.write("verified %d %d\\n" % (lambda r: (r[0], len(r[1])))(ledger.verify()))
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (scripts/setup installs it)")
@pytest.mark.skipif(not _strace_can_trace(), reason="strace cannot trace here (no ptrace: qemu-user emulation)")
def test_ledger_verify_opens_nothing_the_open_ledger_does_not_already_hold(sample: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    _cleanup(sample)
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat,open,write", "-o", str(trace),
           sys.executable, "-c", _VERIFY_AFTER_OPEN, str(sample.parent)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(f"file:{sample}?mode=ro", uri=True) as conn:
        (rows,) = conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()
    conn.close()
    assert done.stdout.splitlines()[-1] == f"verified {rows} 0"
    lines = trace.read_text().splitlines()
    opened_at = next(i for i, line in enumerate(lines) if 'write(1, "opened' in line)
    after = "\n".join(lines[opened_at:])
    # One 1-thread scan on the ledger's own connection, the kernel on the ledger's own map.
    assert not _opens_in(after, sample), after
    assert not _opens_in(after, sample.with_suffix(".bodies")), after
    _cleanup(sample)


def _opens_in(text: str, target: Path) -> list[str]:
    name = re.escape(f'"{target}"')
    pattern = re.compile(rf"\bopen(at)?\((AT_FDCWD, )?{name}, .*\) = \d+")
    return [line for line in _whole_calls(text) if pattern.search(line)]


_UNFINISHED = re.compile(r"^(\d+) +(.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. \w+ resumed>(.*)$")


def _whole_calls(text: str) -> list[str]:
    """strace -f lines with each call another thread interrupted ("<unfinished ...>", then
    "<... openat resumed>") joined back into one line, as when no thread got in between."""
    pending: dict[str, str] = {}
    lines = []
    for line in text.splitlines():
        if m := _UNFINISHED.match(line):
            pending[m.group(1)] = f"{m.group(1)} {m.group(2)}"
        elif (m := _RESUMED.match(line)) and m.group(1) in pending:
            lines.append(pending.pop(m.group(1)) + m.group(2))
        else:
            lines.append(line)
    return lines
