"""Capsem's ``main.db`` (the host session index), read and written exactly as Capsem does:
its layout, opening and creating it, registering and marking sessions, and reading rows.

Layout (``docs/sessions.md``, from Capsem's ``session_index.rs`` at ``user_version`` 7): a
``sessions`` table of 25 columns, the indexes ``idx_sessions_created`` and
``idx_sessions_status``, and the usage tables ``ai_usage``, ``tool_usage`` and ``mcp_usage``.
Capsem's own tools read the file by column name and never look at ``user_version``, so this
module does the same: any main.db whose ``sessions`` table has the columns an operation needs
is read (and written) whatever its version, and nothing here ever alters its schema. A new
main.db is created with Capsem's DDL, WAL journal mode and ``user_version = 7``.

The rollup, which writes a session's totals here, is :mod:`capsem_core.sessions.totals`.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from capsem_core import db
from capsem_core.errors import LedgerError, SchemaMismatch
from capsem_core.paths import refuse_symlink

# The version Capsem's session index stamps. Written on creation only; never checked.
MAIN_DB_VERSION = 7

# Capsem's DDL, statement by statement, as session_index.rs runs it on every open.
MAIN_DB_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    command TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    created_at TEXT NOT NULL,
    stopped_at TEXT,
    scratch_disk_size_gb INTEGER NOT NULL DEFAULT 16,
    ram_bytes INTEGER NOT NULL DEFAULT 4294967296,
    total_requests INTEGER NOT NULL DEFAULT 0,
    allowed_requests INTEGER NOT NULL DEFAULT 0,
    denied_requests INTEGER NOT NULL DEFAULT 0,
    total_input_tokens INTEGER NOT NULL DEFAULT 0,
    total_output_tokens INTEGER NOT NULL DEFAULT 0,
    total_estimated_cost REAL NOT NULL DEFAULT 0.0,
    total_tool_calls INTEGER NOT NULL DEFAULT 0,
    total_file_events INTEGER NOT NULL DEFAULT 0,
    compressed_size_bytes INTEGER,
    vacuumed_at TEXT,
    storage_mode TEXT NOT NULL DEFAULT 'block',
    rootfs_hash TEXT,
    rootfs_version TEXT,
    forked_from TEXT,
    persistent BOOLEAN NOT NULL DEFAULT 0,
    exec_count INTEGER NOT NULL DEFAULT 0,
    audit_event_count INTEGER NOT NULL DEFAULT 0
)""",
    "CREATE INDEX IF NOT EXISTS idx_sessions_created ON sessions(created_at)",
    "CREATE INDEX IF NOT EXISTS idx_sessions_status ON sessions(status)",
    """CREATE TABLE IF NOT EXISTS ai_usage (
    session_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost REAL NOT NULL DEFAULT 0.0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, provider)
)""",
    """CREATE TABLE IF NOT EXISTS tool_usage (
    session_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    call_count INTEGER NOT NULL DEFAULT 0,
    total_bytes INTEGER NOT NULL DEFAULT 0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, tool_name)
)""",
    """CREATE TABLE IF NOT EXISTS mcp_usage (
    session_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    server_name TEXT NOT NULL,
    call_count INTEGER NOT NULL DEFAULT 0,
    total_bytes INTEGER NOT NULL DEFAULT 0,
    total_duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, tool_name)
)""",
)

SESSION_COLUMNS: tuple[str, ...] = (
    "id", "mode", "command", "status", "created_at", "stopped_at", "scratch_disk_size_gb", "ram_bytes",
    "total_requests", "allowed_requests", "denied_requests", "total_input_tokens", "total_output_tokens",
    "total_estimated_cost", "total_tool_calls", "total_file_events", "compressed_size_bytes", "vacuumed_at",
    "storage_mode", "rootfs_hash", "rootfs_version", "forked_from", "persistent", "exec_count",
    "audit_event_count",
)
USAGE_TABLES: tuple[str, ...] = ("ai_usage", "tool_usage", "mcp_usage")

# Capsem's eight total columns, which the rollup writes.
TOTAL_COLUMNS: tuple[str, ...] = (
    "total_requests", "allowed_requests", "denied_requests", "total_input_tokens", "total_output_tokens",
    "total_estimated_cost", "total_tool_calls", "total_file_events",
)
# Every main.db column Capsem's doctor reads (check_session and list_sessions together).
DOCTOR_COLUMNS: tuple[str, ...] = ("id", "mode", "status", "created_at", "stopped_at", "storage_mode", *TOTAL_COLUMNS)
# What each doctor tool selects: list_sessions never reads ``mode``, check_session --list
# never reads ``storage_mode``, so each tolerates a main.db without the other's column.
LIST_COLUMNS: tuple[str, ...] = tuple(c for c in DOCTOR_COLUMNS if c != "mode")
CHECK_COLUMNS: tuple[str, ...] = tuple(c for c in DOCTOR_COLUMNS if c != "storage_mode")
# What resolving "the latest session" needs, and what the rollup writes (plus exec_count and
# audit_event_count where main.db has them).
LATEST_COLUMNS: tuple[str, ...] = ("id", "created_at")
ROLLUP_COLUMNS: tuple[str, ...] = ("id", *TOTAL_COLUMNS)
# main.db count columns some versions have, and the ledger table each counts.
OPTIONAL_COUNTS: dict[str, str] = {"exec_count": "exec_events", "audit_event_count": "audit_events"}


def now_text() -> str:
    """Now in UTC as Capsem stamps times: ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def connect(path: Path, *, readonly: bool, create: bool = False) -> sqlite3.Connection:
    """main.db through the one connection policy (``capsem_core.db``), in autocommit mode."""
    if readonly:
        conn = db.connect_readonly(path, isolation_level=None, check_same_thread=True)
        # A TEXT value that is not UTF-8 (SQLite stores what it is given) would fail the
        # whole read; it is read as its exact bytes, and shown escaped.
        conn.text_factory = db.exact_text
        return conn
    # SQLite opens a file it cannot write read-only, and its first write then fails as
    # "unable to open database file" or "readonly database": said here plainly instead.
    if os.path.exists(path) and not (os.access(path, os.W_OK) and db.directory_writable(path.parent)):
        raise LedgerError("cannot write main.db: the file or its directory is read-only", path)
    try:
        return db.connect_readwrite(path, create=create)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open: {exc}", path) from exc


@contextmanager
def writing(conn: sqlite3.Connection, path: Path, failure: str) -> Iterator[sqlite3.Connection]:
    """Run a write on ``conn`` and close it: an SQLite error becomes one LedgerError
    ``"<failure>: <error>"`` naming ``path``, and a transaction left open is rolled back."""
    try:
        yield conn
    except sqlite3.Error as exc:
        raise LedgerError(f"{failure}: {exc}", path) from exc
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """The column names of ``table`` in ``conn``, in table order (none when it is absent)."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def require_columns(conn: sqlite3.Connection, path: Path, needed: Sequence[str]) -> set[str]:
    """The columns of ``sessions``; SchemaMismatch naming every one of ``needed`` it lacks."""
    try:
        have = set(table_columns(conn, "sessions"))
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"not a readable SQLite main.db: {exc}", path) from exc
    if not have:
        raise SchemaMismatch("not a Capsem main.db: it has no sessions table", path)
    missing = [c for c in needed if c not in have]
    if missing:
        raise SchemaMismatch(f"main.db sessions table lacks column(s) {', '.join(missing)}", path)
    return have


def open_main_db(path: os.PathLike[str] | str, *, readonly: bool = True,
                 need: Sequence[str] = DOCTOR_COLUMNS) -> tuple[sqlite3.Connection, set[str]]:
    """Open an existing main.db and check that ``sessions`` has the columns in ``need``.

    Returns the connection and the set of ``sessions`` columns. A connection for writing is
    put in WAL mode, as Capsem opens it; nothing else about the file is changed."""
    path = Path(path)
    refuse_symlink(path, "main.db")
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise LedgerError(f"main.db not found at {path}") from None
    except OSError as exc:
        raise LedgerError(f"cannot stat main.db: {exc.strerror or exc}", path) from None
    if not stat.S_ISREG(mode):
        # SQLite would open a FIFO and wait for a writer, retrying through every signal.
        raise LedgerError("main.db is not a regular file", path)
    conn = connect(path, readonly=readonly)
    try:
        have = require_columns(conn, path, need)
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
    except sqlite3.Error as exc:
        conn.close()
        raise LedgerError(f"cannot open main.db for writing: {exc}", path) from exc
    except BaseException:
        conn.close()
        raise
    return conn, have


def create_main_db(path: os.PathLike[str] | str) -> Path:
    """Create main.db (and its directory) with Capsem's DDL, WAL mode and user_version 7.

    An existing main.db, of any version, is left exactly as it is: it only has to have the
    columns the doctor reads."""
    path = Path(path)
    refuse_symlink(path, "main.db")
    if path.exists():
        open_main_db(path)[0].close()
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerError(f"cannot create main.db's directory: {exc}", path.parent) from exc
    with writing(connect(path, readonly=False, create=True), path, "cannot create main.db") as conn:
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("BEGIN IMMEDIATE")
        # Another process may have created it between the exists() check and our lock.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'").fetchone():
            conn.execute("ROLLBACK")
            require_columns(conn, path, DOCTOR_COLUMNS)
            return path
        for statement in MAIN_DB_DDL:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {MAIN_DB_VERSION}")
        conn.execute("COMMIT")
    return path


def insert_session(main_db: os.PathLike[str] | str, session_id: str, *, mode: str, status: str,
                   created_at: str, storage_mode: str, persistent: bool) -> Path:
    """Insert a ``sessions`` row with the columns Capsem sets when a session starts (those the
    file has; every other column keeps its default). main.db is created if missing."""
    path = create_main_db(main_db)
    conn, have = open_main_db(path, readonly=False)
    values: dict[str, object] = {"id": session_id, "mode": mode, "status": status, "created_at": created_at,
                                 "storage_mode": storage_mode, "persistent": 1 if persistent else 0}
    names = [c for c in values if c in have]
    try:
        conn.execute(f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                     [values[c] for c in names])
    except sqlite3.IntegrityError as exc:
        raise LedgerError(f"session {session_id} is already registered ({exc})", path) from exc
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot register session {session_id}: {exc}", path) from exc
    finally:
        conn.close()
    return path


def mark_session(main_db: os.PathLike[str] | str, session_id: str, status: str,
                 stopped_at: str | None = None) -> None:
    """Set a session's status (``stopped``, ``crashed`` ...) and when it stopped (now if None),
    as the stopping service gives them to Capsem's ``record_session_stop``."""
    if not status:
        raise ValueError("a session status is a non-empty word")
    path = Path(main_db)
    conn, _ = open_main_db(path, readonly=False, need=("id", "status", "stopped_at"))
    try:
        cur = conn.execute("UPDATE sessions SET status = ?, stopped_at = ? WHERE id = ?",
                           (status, stopped_at or now_text(), session_id))
        if cur.rowcount == 0:
            raise LedgerError(f"session {session_id!r} is not registered", path)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot mark session {session_id}: {exc}", path) from exc
    finally:
        conn.close()


# --- rows ----------------------------------------------------------------------------------

def as_int(value: object) -> int:
    # main.db columns have affinities, not types: a hostile or damaged file may hold text.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def as_float(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def as_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class SessionRow:
    """The doctor's columns of one ``sessions`` row; numbers read with NULL (or junk) as 0, a
    column the file does not have as None."""

    id: str
    mode: str | None
    status: str | None
    created_at: str | None
    stopped_at: str | None
    storage_mode: str | None
    total_requests: int
    allowed_requests: int
    denied_requests: int
    total_input_tokens: int
    total_output_tokens: int
    total_estimated_cost: float
    total_tool_calls: int
    total_file_events: int

    @classmethod
    def from_tuple(cls, row: Sequence[object]) -> SessionRow:
        sid, mode, status, created, stopped, storage, req, allowed, denied, tin, tout, cost, tools, files = row
        return cls(sid if isinstance(sid, str) else str(sid), as_text(mode), as_text(status), as_text(created),
                   as_text(stopped), as_text(storage), as_int(req), as_int(allowed), as_int(denied),
                   as_int(tin), as_int(tout), as_float(cost), as_int(tools), as_int(files))

    @property
    def total_tokens(self) -> int:
        return self.total_input_tokens + self.total_output_tokens


def select_rows_sql(have: set[str], alias: str = "s") -> str:
    """``SELECT`` of the doctor's columns in SessionRow order, NULL for any the file lacks."""
    cells = [f"{alias}.{c}" if c in have else f"NULL AS {c}" for c in DOCTOR_COLUMNS]
    return f"SELECT {', '.join(cells)} FROM sessions AS {alias}"


# 1-based result columns of select_rows_sql, for ORDER BY on a compound SELECT.
ID_COLUMN = DOCTOR_COLUMNS.index("id") + 1
CREATED_AT_COLUMN = DOCTOR_COLUMNS.index("created_at") + 1


def recent_sessions(main_db: os.PathLike[str] | str, n: int = 5) -> list[SessionRow]:
    """The ``n`` most recently created sessions, newest first (check's ``--list``)."""
    path = Path(main_db)
    if not path.exists():
        raise LedgerError(f"main.db not found at {path}")
    conn, have = open_main_db(path, need=CHECK_COLUMNS)
    try:
        rows = conn.execute(f"{select_rows_sql(have)} ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
                            (max(0, n),)).fetchall()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read sessions: {exc}", path) from exc
    finally:
        conn.close()
    return [SessionRow.from_tuple(r) for r in rows]


def latest_session_id(main_db: Path) -> str | None:
    conn, _ = open_main_db(main_db, need=LATEST_COLUMNS)
    try:
        row = conn.execute("SELECT id FROM sessions ORDER BY created_at DESC, id DESC LIMIT 1").fetchone()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read sessions: {exc}", main_db) from exc
    finally:
        conn.close()
    return None if row is None else (row[0] if isinstance(row[0], str) else str(row[0]))


def session_recorded(main_db: Path, session_id: str) -> bool:
    conn, _ = open_main_db(main_db, need=("id",))
    try:
        return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read sessions: {exc}", main_db) from exc
    finally:
        conn.close()
