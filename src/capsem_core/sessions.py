"""Sessions: where ledgers live, the host rollup ``main.db``, session identity and ``list``.

This module owns:

* the paths of one Capsem home (``CAPSEM_HOME``, ``CAPSEM_RUN_DIR``, ``main.db``);
* ``main.db``: its DDL (``sessions`` plus the per-session ``ai_usage``, ``tool_usage`` and
  ``mcp_usage`` aggregates), its version stamp (``PRAGMA user_version``) and the check that
  refuses a main.db written by another build;
* session registration and status (``register_session``, ``mark_session``);
* the rollup: every total of one session recomputed from its ledger and written over the
  old numbers (``rollup``, ``rollup_on_close`` for ``LedgerWriter(on_close=...)``);
* session identity: the one resolver from a word (session id or display name) to a ledger
  directory (``resolve_session``), which the ``check``, ``list`` and ``rollup`` commands and
  the Python API all use;
* the ``list`` and ``rollup`` commands of ``capsem-ledger``.

Identity rule (the ledger's invariant): a session id is opaque and names the ephemeral
ledger directory ``run/sessions/<id>/``; a display name is only an alias, stored in
``sessions.name``, and names the persistent directory ``run/persistent/<name>/``. A name is
turned into an id through main.db, never by assuming the two are equal.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TextIO

from capsem_core import db
from capsem_core.format import LedgerError, SchemaMismatch, SymlinkRefused

# This build's main.db layout. The Capsem session index this derives from was stamped 7;
# 8 adds the display ``name`` column, ``total_mcp_calls``, ``rolled_up_at`` and the usage
# tables. Any other stamp is another build's file and is refused, never migrated.
MAIN_DB_VERSION = 8

SESSION_DB = "session.db"
SESSION_BODIES = "session.bodies"

# Session ids and display names become directory names, so they are held to a short
# allowlist: letters, digits, '.', '_' and '-', starting with a letter or digit.
MAX_SESSION_WORD = 128
_SESSION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

Kind = Literal["ephemeral", "persistent"]

# --- main.db DDL ---------------------------------------------------------------------------

MAIN_DB_SQL = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    name TEXT,
    mode TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',
    created_at TEXT NOT NULL,
    stopped_at TEXT,
    storage_mode TEXT NOT NULL DEFAULT 'block',
    total_requests INTEGER NOT NULL DEFAULT 0,
    allowed_requests INTEGER NOT NULL DEFAULT 0,
    denied_requests INTEGER NOT NULL DEFAULT 0,
    total_input_tokens INTEGER NOT NULL DEFAULT 0,
    total_output_tokens INTEGER NOT NULL DEFAULT 0,
    total_estimated_cost REAL NOT NULL DEFAULT 0.0,
    total_tool_calls INTEGER NOT NULL DEFAULT 0,
    total_mcp_calls INTEGER NOT NULL DEFAULT 0,
    total_file_events INTEGER NOT NULL DEFAULT 0,
    rolled_up_at TEXT
);
CREATE INDEX idx_sessions_created_at ON sessions(created_at, id);
CREATE INDEX idx_sessions_status ON sessions(status);
CREATE INDEX idx_sessions_name ON sessions(name);
CREATE TABLE ai_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost REAL NOT NULL DEFAULT 0.0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, provider, model)
);
CREATE TABLE tool_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    tool_name TEXT NOT NULL,
    origin TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    allowed_calls INTEGER NOT NULL DEFAULT 0,
    denied_calls INTEGER NOT NULL DEFAULT 0,
    error_calls INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, tool_name, origin)
);
CREATE TABLE mcp_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    server_name TEXT NOT NULL,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    distinct_tools INTEGER NOT NULL DEFAULT 0,
    allowed_calls INTEGER NOT NULL DEFAULT 0,
    denied_calls INTEGER NOT NULL DEFAULT 0,
    error_calls INTEGER NOT NULL DEFAULT 0,
    bytes_sent INTEGER NOT NULL DEFAULT 0,
    bytes_received INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, server_name)
);
"""

SESSION_COLUMNS: tuple[str, ...] = (
    "id", "name", "mode", "status", "created_at", "stopped_at", "storage_mode",
    "total_requests", "allowed_requests", "denied_requests", "total_input_tokens",
    "total_output_tokens", "total_estimated_cost", "total_tool_calls", "total_mcp_calls",
    "total_file_events", "rolled_up_at",
)
_MAIN_DB_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": SESSION_COLUMNS,
    "ai_usage": ("session_id", "provider", "model", "calls", "input_tokens", "output_tokens",
                 "estimated_cost", "duration_ms"),
    "tool_usage": ("session_id", "tool_name", "origin", "calls", "allowed_calls", "denied_calls",
                   "error_calls", "duration_ms"),
    "mcp_usage": ("session_id", "server_name", "tool_calls", "distinct_tools", "allowed_calls",
                  "denied_calls", "error_calls", "bytes_sent", "bytes_received", "duration_ms"),
}

# The ledger columns the rollup reads; a ledger without them is another build's.
_LEDGER_COLUMNS: dict[str, tuple[str, ...]] = {
    "net_events": ("decision",),
    "model_calls": ("provider", "model", "input_tokens", "output_tokens", "estimated_cost_usd",
                    "duration_ms"),
    "tool_calls": ("tool_name", "origin", "server_name", "decision", "status", "duration_ms",
                   "bytes_sent", "bytes_received"),
    "fs_events": ("action",),
}

# --- paths ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Home:
    """One Capsem home: the rollup database and the run directory that holds ledgers."""

    home: Path
    run: Path

    @property
    def main_db(self) -> Path:
        return self.home / "sessions" / "main.db"

    @property
    def sessions_root(self) -> Path:
        return self.run / "sessions"

    @property
    def persistent_root(self) -> Path:
        return self.run / "persistent"


def capsem_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME``, default ``~/.capsem``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_HOME")
    return Path(value) if value else Path.home() / ".capsem"


def run_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_RUN_DIR``, default ``$CAPSEM_HOME/run``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_RUN_DIR")
    return Path(value) if value else capsem_home(env) / "run"


def main_db_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME/sessions/main.db``."""
    return capsem_home(environ) / "sessions" / "main.db"


def home_layout(home: Home | os.PathLike[str] | str | None = None,
                environ: Mapping[str, str] | None = None) -> Home:
    """The layout to use: from the environment when ``home`` is None; an explicit home path
    is self-contained (its run directory is ``<home>/run``, whatever the environment says)."""
    if isinstance(home, Home):
        return home
    if home is None:
        return Home(capsem_home(environ), run_dir(environ))
    return Home(Path(home), Path(home) / "run")


# --- session words (ids and display names) -------------------------------------------------

def session_word_problem(word: object) -> str | None:
    """Why ``word`` cannot name a session directory, or None when it can."""
    if isinstance(word, str) and len(word) <= MAX_SESSION_WORD and _SESSION_WORD.fullmatch(word):
        return None
    if not isinstance(word, str):
        return f"a session id or name must be text, not {type(word).__name__}"
    if word == "":
        return "it is empty"
    if "\0" in word:
        return "it contains a NUL byte"
    if "/" in word or "\\" in word:
        return "it contains a path separator"
    if word in (".", ".."):
        return "it names a directory itself, not a session"
    if word.startswith("-"):
        return "it starts with '-'"
    if word.startswith("."):
        return "it starts with '.'"
    if len(word) > MAX_SESSION_WORD:
        return f"it is {len(word)} characters long, more than {MAX_SESSION_WORD}"
    if not _SESSION_WORD.fullmatch(word):
        return "only letters, digits, '.', '_' and '-' may name a session"
    return None


def check_session_word(word: object, what: str = "session") -> str:
    """Return ``word`` if it may name a session directory, else raise LedgerError.

    Runs before any path is built from the word, so nothing outside the run directory is
    ever touched on its behalf."""
    problem = session_word_problem(word)
    if problem is not None:
        raise LedgerError(f"refusing {what} {word!r}: {problem}")
    return word  # type: ignore[return-value]


# --- the ledger pair on disk ---------------------------------------------------------------

def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _pair_on_disk(directory: Path) -> bool:
    """session.db and session.bodies are regular files in a directory that is not a link."""
    return (_is_real_dir(directory) and _is_regular_file(directory / SESSION_DB)
            and _is_regular_file(directory / SESSION_BODIES))


def ledger_directory(layout: Home, session_id: str | None, name: str | None) -> Path | None:
    """Where a session's ledger lives: ``persistent/<name>`` for a named VM, else
    ``sessions/<id>``; None when the id or name could escape its root."""
    if name is not None:
        return None if session_word_problem(name) else layout.persistent_root / name
    if session_id is None or session_word_problem(session_id):
        return None
    return layout.sessions_root / session_id


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A resolved session: its id, its display name and where its ledger lives.

    ``id`` is None only for a persistent VM whose directory exists but which main.db does
    not record (its id cannot be known, and is never guessed from the name)."""

    id: str | None
    name: str | None
    directory: Path
    kind: Kind
    has_ledger: bool

    @property
    def db_path(self) -> Path:
        return self.directory / SESSION_DB

    @property
    def bodies_path(self) -> Path:
        return self.directory / SESSION_BODIES

    @property
    def label(self) -> str:
        """How to name the session to a person: ``name (id)``, or whichever is known."""
        if self.name and self.id:
            return f"{self.name} ({self.id})"
        return self.name or self.id or str(self.directory)


def ledger_exists(ref: SessionRef) -> bool:
    """True when ``session.db`` and ``session.bodies`` are really on disk, as regular files
    (not links) in ``ref.directory`` (itself not a link). Looks again; ``ref.has_ledger`` is
    what was seen at resolve time."""
    return _pair_on_disk(ref.directory)


# --- main.db -------------------------------------------------------------------------------

def _now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    # db.py owns how a SQLite file is opened (read-only media, busy timeout).
    if readonly:
        return db.connect_readonly(path, isolation_level=None, check_same_thread=True)
    try:
        return db.connect_readwrite(path)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot open: {exc}", path) from exc


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _check_main_db(conn: sqlite3.Connection, path: Path) -> None:
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "sessions" not in tables:
            raise SchemaMismatch(f"not a Capsem main.db: it has no sessions table (user_version {version})", path)
        if version != MAIN_DB_VERSION:
            raise SchemaMismatch(
                f"main.db user_version is {version}, this build reads version {MAIN_DB_VERSION}: "
                "it was written by another Capsem build and is not migrated", path)
        for table, wanted in _MAIN_DB_COLUMNS.items():
            if table not in tables:
                raise SchemaMismatch(f"main.db has no {table} table (written by another build?)", path)
            have = set(_columns(conn, table))
            missing = [c for c in wanted if c not in have]
            if missing:
                raise SchemaMismatch(f"main.db table {table} lacks column(s) {', '.join(missing)} "
                                     "(written by another build?)", path)
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"not a readable SQLite main.db: {exc}", path) from exc


def open_main_db(path: os.PathLike[str] | str, *, readonly: bool = True) -> sqlite3.Connection:
    """Open an existing main.db of this build (checked), read-only unless asked otherwise."""
    path = Path(path)
    if not path.exists():
        raise LedgerError("main.db not found", path)
    conn = _connect(path, readonly=readonly)
    try:
        _check_main_db(conn, path)
        if not readonly:
            conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def create_main_db(path: os.PathLike[str] | str) -> Path:
    """Create main.db (and its directory) with this build's DDL and version stamp.

    Idempotent on a main.db of this build; a file from another build is refused."""
    path = Path(path)
    if path.exists():
        open_main_db(path).close()
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = db.connect_readwrite(path, create=True)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot create main.db: {exc}", path) from exc
    try:
        conn.execute("BEGIN IMMEDIATE")
        # Another process may have created it between the exists() check and our lock.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").fetchone():
            conn.execute("ROLLBACK")
            _check_main_db(conn, path)
            return path
        for statement in _statements(MAIN_DB_SQL):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {MAIN_DB_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot create main.db: {exc}", path) from exc
    finally:
        conn.close()
    return path


def _statements(batch: str) -> list[str]:
    return [s.strip() for s in batch.split(";") if s.strip()]


def register_session(main_db: os.PathLike[str] | str, session_id: str, *, name: str | None = None,
                     mode: str = "cli", status: str = "running", created_at: str | None = None,
                     storage_mode: str = "block") -> None:
    """Record a new session in main.db (created if missing). ``name`` is the display name of a
    persistent VM (its ledger is ``run/persistent/<name>/``); None for an ephemeral session."""
    check_session_word(session_id, "session id")
    if name is not None:
        check_session_word(name, "session name")
    path = create_main_db(main_db)
    conn = open_main_db(path, readonly=False)
    try:
        conn.execute(
            "INSERT INTO sessions (id, name, mode, status, created_at, storage_mode) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, name, mode, status, created_at or _now_text(), storage_mode))
    except sqlite3.IntegrityError as exc:
        raise LedgerError(f"session {session_id} is already registered ({exc})", path) from exc
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot register session {session_id}: {exc}", path) from exc
    finally:
        conn.close()


def mark_session(main_db: os.PathLike[str] | str, session_id: str, status: str,
                 stopped_at: str | None = None) -> None:
    """Set a session's status (``stopped``, ``crashed`` ...) and when it stopped (now if None)."""
    if not status:
        raise ValueError("a session status is a non-empty word")
    path = Path(main_db)
    conn = open_main_db(path, readonly=False)
    try:
        cur = conn.execute("UPDATE sessions SET status = ?, stopped_at = ? WHERE id = ?",
                           (status, stopped_at or _now_text(), session_id))
        if cur.rowcount == 0:
            raise LedgerError(f"session {session_id!r} is not registered", path)
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot mark session {session_id}: {exc}", path) from exc
    finally:
        conn.close()


# --- rows ----------------------------------------------------------------------------------

def _int(value: object) -> int:
    # main.db columns have affinities, not types: a hostile or damaged file may hold text.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def _float(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One ``sessions`` row, numbers read with NULL (or junk) as 0."""

    id: str
    name: str | None
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
    total_mcp_calls: int
    total_file_events: int
    rolled_up_at: str | None

    @classmethod
    def from_tuple(cls, row: Sequence[object]) -> SessionRow:
        (sid, name, mode, status, created, stopped, storage, req, allowed, denied, tin, tout,
         cost, tools, mcp, files, rolled) = row
        return cls(str(sid), _text(name), _text(mode), _text(status), _text(created), _text(stopped),
                   _text(storage), _int(req), _int(allowed), _int(denied), _int(tin), _int(tout),
                   _float(cost), _int(tools), _int(mcp), _int(files), _text(rolled))

    @property
    def total_tokens(self) -> int:
        return self.total_input_tokens + self.total_output_tokens


# 1-based result columns, for ORDER BY on a compound SELECT.
_ID_COLUMN = SESSION_COLUMNS.index("id") + 1
_CREATED_AT_COLUMN = SESSION_COLUMNS.index("created_at") + 1
_SELECT_SESSIONS = "SELECT " + ", ".join(f"s.{c}" for c in SESSION_COLUMNS) + " FROM sessions AS s"


def recent_sessions(main_db: os.PathLike[str] | str, n: int = 5) -> list[SessionRow]:
    """The ``n`` most recently created sessions, newest first (check's ``--list``)."""
    path = Path(main_db)
    if not path.exists():
        raise LedgerError(f"main.db not found at {path}")
    conn = open_main_db(path)
    try:
        rows = conn.execute(f"{_SELECT_SESSIONS} ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
                            (max(0, n),)).fetchall()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read sessions: {exc}", path) from exc
    finally:
        conn.close()
    return [SessionRow.from_tuple(r) for r in rows]


# --- session identity ----------------------------------------------------------------------

def _ref(layout: Home, session_id: str | None, name: str | None, source: Path) -> SessionRef:
    directory = ledger_directory(layout, session_id, name)
    if directory is None:
        bad = name if name is not None else session_id
        raise LedgerError(f"main.db records session {session_id!r} under name {name!r}, which "
                          f"cannot name a directory: {session_word_problem(bad)}", source)
    kind: Kind = "persistent" if name is not None else "ephemeral"
    if os.path.islink(directory):
        raise SymlinkRefused(f"refusing session {session_id or name}: its ledger directory is a "
                             "symbolic link", directory)
    return SessionRef(session_id, name, directory, kind, _pair_on_disk(directory))


def resolve_session(word: str | None, *, home: Home | os.PathLike[str] | str | None = None,
                    require_db: bool = True) -> SessionRef:
    """Turn a session id, a display name, or None (the latest session) into a SessionRef.

    Order: an id recorded in main.db; else the newest session recorded under that display
    name; else an ephemeral directory ``run/sessions/<word>/`` (directory names there are
    ids); else a persistent directory ``run/persistent/<word>/`` (a name, id unknown). A word
    that could escape its directory is refused before anything is looked up. With
    ``require_db`` (the default) a session whose ``session.db`` is not on disk is an error
    "session.db not found for <word>"."""
    layout = home_layout(home)
    if word is not None:
        check_session_word(word)
    main_db = layout.main_db
    ref: SessionRef | None = None
    if word is None:
        if not main_db.exists():
            raise LedgerError(f"main.db not found at {main_db}")
        conn = open_main_db(main_db)
        try:
            row = conn.execute("SELECT id, name FROM sessions ORDER BY created_at DESC, id DESC LIMIT 1").fetchone()
        finally:
            conn.close()
        if row is None:
            raise LedgerError("No sessions found in main.db", main_db)
        ref = _ref(layout, _text(row[0]) or str(row[0]), _text(row[1]), main_db)
        word = ref.name or ref.id
    else:
        if main_db.exists():
            conn = open_main_db(main_db)
            try:
                row = conn.execute("SELECT id, name FROM sessions WHERE id = ?", (word,)).fetchone()
                if row is None:
                    row = conn.execute("SELECT id, name FROM sessions WHERE name = ? "
                                       "ORDER BY created_at DESC, id DESC LIMIT 1", (word,)).fetchone()
            finally:
                conn.close()
            if row is not None:
                ref = _ref(layout, str(row[0]), _text(row[1]), main_db)
        if ref is None:
            for root, kind in ((layout.sessions_root, "ephemeral"), (layout.persistent_root, "persistent")):
                candidate = root / word
                if os.path.islink(candidate):
                    raise SymlinkRefused(f"refusing session {word}: its ledger directory is a symbolic link",
                                         candidate)
                if _is_real_dir(candidate):
                    sid, name = (word, None) if kind == "ephemeral" else (None, word)
                    ref = SessionRef(sid, name, candidate, kind, _pair_on_disk(candidate))  # type: ignore[arg-type]
                    break
        if ref is None:
            raise LedgerError(f"session.db not found for {word}")
    if require_db:
        if os.path.islink(ref.db_path):
            raise SymlinkRefused("refusing a session.db that is a symbolic link", ref.db_path)
        if not _is_regular_file(ref.db_path):
            raise LedgerError(f"session.db not found for {word}")
    return ref


# --- rollup --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SessionTotals:
    """What a rollup wrote for one session."""

    session_id: str
    total_requests: int
    allowed_requests: int
    denied_requests: int
    total_input_tokens: int
    total_output_tokens: int
    total_estimated_cost: float
    total_tool_calls: int
    total_mcp_calls: int
    total_file_events: int
    ai_usage: tuple[tuple[str, str, int, int, int, float, int], ...] = field(default_factory=tuple)
    tool_usage: tuple[tuple[str, str, int, int, int, int, int], ...] = field(default_factory=tuple)
    mcp_usage: tuple[tuple[str, int, int, int, int, int, int, int, int], ...] = field(default_factory=tuple)


def _check_ledger_tables(conn: sqlite3.Connection, path: Path) -> None:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, wanted in _LEDGER_COLUMNS.items():
        if table not in tables:
            raise SchemaMismatch(f"ledger has no {table} table, so its totals cannot be rolled up", path)
        have = set(_columns(conn, table))
        missing = [c for c in wanted if c not in have]
        if missing:
            raise SchemaMismatch(f"ledger table {table} lacks column(s) {', '.join(missing)}", path)


def _read_totals(ledger: Path, session_id: str) -> SessionTotals:
    if os.path.islink(ledger):
        raise SymlinkRefused("refusing a session.db that is a symbolic link", ledger)
    if not _is_regular_file(ledger):
        raise LedgerError("session.db not found", ledger)
    conn = _connect(ledger, readonly=True)
    try:
        conn.execute("BEGIN")  # one snapshot for every total
        _check_ledger_tables(conn, ledger)
        req, allowed, denied = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(decision = 'allowed'), 0), COALESCE(SUM(decision = 'denied'), 0) "
            "FROM net_events").fetchone()
        tin, tout, cost = conn.execute(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
            "TOTAL(estimated_cost_usd) FROM model_calls").fetchone()
        tools, mcp = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(origin = 'mcp'), 0) FROM tool_calls").fetchone()
        # An overflow row marks deferred changes, which arrive later as their own rows.
        (files,) = conn.execute("SELECT COUNT(*) FROM fs_events WHERE action IS NOT 'overflow'").fetchone()
        ai = conn.execute(
            "SELECT COALESCE(provider, ''), COALESCE(model, ''), COUNT(*), COALESCE(SUM(input_tokens), 0), "
            "COALESCE(SUM(output_tokens), 0), TOTAL(estimated_cost_usd), COALESCE(SUM(duration_ms), 0) "
            "FROM model_calls GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        tool = conn.execute(
            "SELECT COALESCE(tool_name, ''), COALESCE(origin, ''), COUNT(*), "
            "COALESCE(SUM(decision = 'allowed'), 0), COALESCE(SUM(decision IS NOT 'allowed'), 0), "
            "COALESCE(SUM(status = 'error'), 0), COALESCE(SUM(duration_ms), 0) "
            "FROM tool_calls GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        mcp_rows = conn.execute(
            "SELECT COALESCE(server_name, ''), COUNT(*), COUNT(DISTINCT tool_name), "
            "COALESCE(SUM(decision = 'allowed'), 0), COALESCE(SUM(decision IS NOT 'allowed'), 0), "
            "COALESCE(SUM(status = 'error'), 0), COALESCE(SUM(bytes_sent), 0), "
            "COALESCE(SUM(bytes_received), 0), COALESCE(SUM(duration_ms), 0) "
            "FROM tool_calls WHERE origin = 'mcp' GROUP BY 1 ORDER BY 1").fetchall()
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read the ledger's totals: {exc}", ledger) from exc
    finally:
        conn.close()
    return SessionTotals(
        session_id, _int(req), _int(allowed), _int(denied), _int(tin), _int(tout), _float(cost),
        _int(tools), _int(mcp), _int(files),
        tuple((str(p), str(m), _int(c), _int(i), _int(o), _float(e), _int(d)) for p, m, c, i, o, e, d in ai),
        tuple((str(t), str(o), _int(c), _int(a), _int(dn), _int(e), _int(d)) for t, o, c, a, dn, e, d in tool),
        tuple((str(s), _int(c), _int(dt), _int(a), _int(dn), _int(e), _int(bs), _int(br), _int(d))
              for s, c, dt, a, dn, e, bs, br, d in mcp_rows),
    )


def rollup(main_db_path: os.PathLike[str] | str, session_id: str,
           ledger_db_path: os.PathLike[str] | str) -> SessionTotals:
    """Recompute every total of ``session_id`` from its ledger and write them over main.db's.

    Never increments: running it twice gives the same numbers, and a changed ledger gives
    the new ones. The ledger is opened read-only; a missing table is an error, not a zero."""
    totals = _read_totals(Path(ledger_db_path), session_id)
    path = Path(main_db_path)
    conn = open_main_db(path, readonly=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "UPDATE sessions SET total_requests = ?, allowed_requests = ?, denied_requests = ?, "
            "total_input_tokens = ?, total_output_tokens = ?, total_estimated_cost = ?, "
            "total_tool_calls = ?, total_mcp_calls = ?, total_file_events = ?, rolled_up_at = ? "
            "WHERE id = ?",
            (totals.total_requests, totals.allowed_requests, totals.denied_requests,
             totals.total_input_tokens, totals.total_output_tokens, totals.total_estimated_cost,
             totals.total_tool_calls, totals.total_mcp_calls, totals.total_file_events, _now_text(),
             session_id))
        if cur.rowcount == 0:
            conn.execute("ROLLBACK")
            raise LedgerError(f"session {session_id!r} is not registered, so it has no totals to roll up", path)
        for table in ("ai_usage", "tool_usage", "mcp_usage"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        conn.executemany("INSERT INTO ai_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         ((session_id, *r) for r in totals.ai_usage))
        conn.executemany("INSERT INTO tool_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         ((session_id, *r) for r in totals.tool_usage))
        conn.executemany("INSERT INTO mcp_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         ((session_id, *r) for r in totals.mcp_usage))
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot write the rollup of session {session_id}: {exc}", path) from exc
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
    return totals


def rollup_on_close(main_db_path: os.PathLike[str] | str, session_id: str) -> Callable[[Any], None]:
    """A callback for ``LedgerWriter(..., on_close=...)``: rolls the session up from the
    writer's ``db_path`` once the ledger is closed."""
    main_db = Path(main_db_path)

    def _on_close(writer: Any) -> None:
        rollup(main_db, session_id, writer.db_path)

    return _on_close


def usage_rows(main_db: os.PathLike[str] | str, session_id: str) -> dict[str, list[dict[str, object]]]:
    """The ai_usage, tool_usage and mcp_usage rows of one session, as dicts."""
    path = Path(main_db)
    conn = open_main_db(path)
    conn.row_factory = sqlite3.Row
    try:
        out: dict[str, list[dict[str, object]]] = {}
        for table, order in (("ai_usage", "provider, model"), ("tool_usage", "tool_name, origin"),
                             ("mcp_usage", "server_name")):
            rows = conn.execute(f"SELECT * FROM {table} WHERE session_id = ? ORDER BY {order}", (session_id,))
            out[table] = [dict(r) for r in rows]
        return out
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read usage rows: {exc}", path) from exc
    finally:
        conn.close()


# --- list ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ListFilter:
    """The ``list`` filters, all joined with AND. ``with_db`` is applied before ``limit``."""

    limit: int = 10
    with_model: bool = False
    with_db: bool = False
    with_net: bool = False
    with_tools: bool = False
    min_cost: float = 0.0
    status: str | None = None


@dataclass(frozen=True, slots=True)
class ListedSession:
    row: SessionRow
    directory: Path | None
    has_ledger: bool


def _directory_names(root: Path) -> list[str]:
    """Names of the real (not linked) subdirectories of ``root``, in one directory read
    (d_type answers is_dir without a stat per entry on most filesystems). A name that is
    not a session word can belong to no session, so it is left out."""
    try:
        with os.scandir(root) as entries:
            return [e.name for e in entries
                    if e.is_dir(follow_symlinks=False) and len(e.name) <= MAX_SESSION_WORD
                    and _SESSION_WORD.fullmatch(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise LedgerError(f"cannot list ledger directories: {exc}", root) from exc


def _where(flt: ListFilter) -> tuple[list[str], list[object]]:
    conds: list[str] = []
    params: list[object] = []
    if flt.with_model:
        conds.append("(s.total_input_tokens + s.total_output_tokens) > 0")
    if flt.with_net:
        conds.append("s.total_requests > 0")
    if flt.with_tools:
        conds.append("s.total_tool_calls > 0")
    if flt.min_cost > 0:
        conds.append("s.total_estimated_cost >= ?")
        params.append(float(flt.min_cost))
    if flt.status is not None:
        # '+': streaming the created_at index beats fetching every row of a common status
        # through idx_sessions_status and sorting them.
        conds.append("+s.status = ?")
        params.append(flt.status)
    return conds, params


def _pair_at(directory: str) -> bool:
    # The per-row check of list, on strings: pathlib costs more than the three lstats.
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return False
        return (stat.S_ISREG(os.lstat(directory + "/" + SESSION_DB).st_mode)
                and stat.S_ISREG(os.lstat(directory + "/" + SESSION_BODIES).st_mode))
    except OSError:
        return False


# How many of the newest matching rows --with-db checks one by one before it reads the
# ledger directories instead: most lists end here, and a scan costs a directory read.
_WITH_DB_PROBE_ROWS = 256


def list_sessions(flt: ListFilter, *, home: Home | os.PathLike[str] | str | None = None) -> list[ListedSession]:
    """Sessions of main.db, newest first, filtered, at most ``flt.limit`` of them.

    ``with_db`` is applied before the limit. The newest matching rows are first checked on
    disk one by one (three ``lstat`` each); if that does not fill the list, both ledger
    roots are read once and SQLite looks up the rows whose directory exists, older than the
    last row checked, newest first."""
    layout = home_layout(home)
    path = layout.main_db
    if not path.exists():
        raise LedgerError(f"No main.db found at {path}")
    if flt.limit <= 0:
        return []
    sessions_root = str(layout.sessions_root)
    persistent_root = str(layout.persistent_root)
    conn = open_main_db(path)
    out: list[ListedSession] = []
    last: tuple[object, object] | None = None

    def take(raw: Sequence[object]) -> bool:
        """Add the row if it qualifies; True once the list is full."""
        nonlocal last
        last = (raw[4], raw[0])
        sid, name = raw[0], raw[1]
        word = name if name is not None else sid
        if isinstance(word, str) and session_word_problem(word) is None:
            directory: str | None = (persistent_root if name is not None else sessions_root) + "/" + word
            on_disk = _pair_at(directory)  # type: ignore[operator]
        else:
            directory, on_disk = None, False
        if flt.with_db and not on_disk:
            return False
        out.append(ListedSession(SessionRow.from_tuple(raw), None if directory is None else Path(directory), on_disk))
        return len(out) >= flt.limit

    try:
        conds, params = _where(flt)
        order = " ORDER BY s.created_at DESC, s.id DESC"
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        probe = flt.limit if not flt.with_db else max(flt.limit, _WITH_DB_PROBE_ROWS)
        seen = 0
        for raw in conn.execute(f"{_SELECT_SESSIONS}{where}{order} LIMIT ?", (*params, probe)):
            seen += 1
            if take(raw):
                return out
        if not flt.with_db or seen < probe or last is None:
            return out
        # Driven from the directories (key lookups, then a sort of those rows only), so the
        # cost follows the ledgers on disk, not the size of main.db. The unary '+' keeps
        # SQLite from walking every NULL name through idx_sessions_name instead.
        ephemeral = json.dumps(_directory_names(layout.sessions_root))
        persistent = json.dumps(_directory_names(layout.persistent_root))
        rest = "".join(f" AND {c}" for c in conds) + " AND (+s.created_at, +s.id) < (?, ?)"
        sql = (f"{_SELECT_SESSIONS} WHERE +s.name IS NULL AND s.id IN (SELECT value FROM json_each(?)){rest}"
               f" UNION ALL {_SELECT_SESSIONS} WHERE s.name IN (SELECT value FROM json_each(?)){rest}"
               f" ORDER BY {_CREATED_AT_COLUMN} DESC, {_ID_COLUMN} DESC")
        for raw in conn.execute(sql, (ephemeral, *params, *last, persistent, *params, *last)):
            if take(raw):
                break
        return out
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot list sessions: {exc}", path) from exc
    finally:
        conn.close()


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_created(created_at: str | None) -> str:
    """``MM-DD HH:MM:SS``; the first 16 characters of the raw text when it does not parse."""
    raw = created_at or ""
    try:
        return _parse_time(raw).strftime("%m-%d %H:%M:%S")
    except (ValueError, TypeError):
        return raw[:16]


def format_duration(created_at: str | None, stopped_at: str | None, status: str | None) -> str:
    """``running`` / ``?`` without both times; else ``{s}s``, ``{m}m{s}s`` or ``{h}h{m}m``."""
    if not stopped_at or not created_at:
        return "running" if status == "running" else "?"
    try:
        s = int((_parse_time(stopped_at) - _parse_time(created_at)).total_seconds())
    except (ValueError, TypeError, OverflowError):
        return "?"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    return f"{s // 3600}h{(s % 3600) // 60}m"


_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"

# main.db and ledgers are data, not trusted text: control characters (escape sequences,
# newlines) in an id or a tool name must not reach the terminal.
_CONTROLS = {c: "?" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """``text`` with every control character shown as '?'."""
    return text.translate(_CONTROLS)
LIST_FOOTER = "* = session.db on disk (queryable)"


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set."""
    if "NO_COLOR" in os.environ:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def list_header() -> str:
    return (f"{'ID':<36}  {'Created':>16}  {'Dur':>6}  {'Cost':>7}  {'net':>5}  "
            f"{'tokens':>7}  {'tool':>5}  {'fs':>5}")


def format_list_row(item: ListedSession) -> str:
    r = item.row
    marker = "*" if item.has_ledger else " "
    return (f"{printable(r.id):<36}{marker} {printable(format_created(r.created_at)):>16}  "
            f"{format_duration(r.created_at, r.stopped_at, r.status):>6}  "
            f"${r.total_estimated_cost:>6.2f}  {r.total_requests:>5}  {r.total_tokens:>7}  "
            f"{r.total_tool_calls:>5}  {r.total_file_events:>5}")


def format_list(items: Sequence[ListedSession], colour: bool = False) -> list[str]:
    """The text lines of ``list`` (header, rule, rows, blank, footer)."""
    bold, dim, reset = (_BOLD, _DIM, _RESET) if colour else ("", "", "")
    header = list_header()
    lines = [f"{bold}{header}{reset}", f"{dim}{'-' * len(header)}{reset}"]
    lines.extend(format_list_row(i) for i in items)
    lines.extend(["", f"{dim}{LIST_FOOTER}{reset}"])
    return lines


def listed_json(item: ListedSession) -> dict[str, object]:
    """One ``list --json`` object: every main.db column raw, the formatted cells, the ledger."""
    r = item.row
    obj: dict[str, object] = asdict(r)
    obj["total_tokens"] = r.total_tokens
    obj["has_ledger"] = item.has_ledger
    obj["ledger_dir"] = str(item.directory) if item.has_ledger and item.directory is not None else None
    obj["formatted"] = {
        "created": format_created(r.created_at),
        "duration": format_duration(r.created_at, r.stopped_at, r.status),
        "cost": f"${r.total_estimated_cost:.2f}",
        "net": str(r.total_requests),
        "tokens": str(r.total_tokens),
        "tool": str(r.total_tool_calls),
        "fs": str(r.total_file_events),
    }
    return obj


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _cost(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite amount of at least 0")
    return value


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=_count, default=10, metavar="N", help="show at most N sessions (default 10)")
    parser.add_argument("--with-model", action="store_true", help="only sessions with AI model calls")
    parser.add_argument("--with-db", action="store_true",
                        help="only sessions whose ledger is still on disk (applied before -n)")
    parser.add_argument("--with-net", action="store_true", help="only sessions with network events")
    parser.add_argument("--with-tools", action="store_true", help="only sessions with tool calls")
    parser.add_argument("--min-cost", type=_cost, default=0.0, metavar="X",
                        help="only sessions that cost at least X dollars")
    parser.add_argument("--status", default=None, metavar="STATUS", help="only sessions with this status")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")


def run_list(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    layout = home_layout()
    if not layout.main_db.exists():
        print(f"No main.db found at {layout.main_db}", file=err)
        return 1
    flt = ListFilter(limit=args.n, with_model=args.with_model, with_db=args.with_db, with_net=args.with_net,
                     with_tools=args.with_tools, min_cost=args.min_cost, status=args.status)
    items = list_sessions(flt, home=layout)
    if args.json:
        json.dump([listed_json(i) for i in items], out, indent=2)
        out.write("\n")
        return 0
    if not items:
        print("No sessions found", file=out)
        return 0
    out.write("\n".join(format_list(items, use_colour(out))) + "\n")
    return 0


# --- rollup command ------------------------------------------------------------------------

def add_rollup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", default=None,
                        help="session id or display name (default: the latest session in main.db)")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON")


def _totals_lines(ref: SessionRef, totals: SessionTotals) -> Iterator[str]:
    yield from (printable(line) for line in _raw_totals_lines(ref, totals))


def _raw_totals_lines(ref: SessionRef, totals: SessionTotals) -> Iterator[str]:
    yield f"Rolled up {ref.label} from {ref.db_path}"
    yield f"  requests     {totals.total_requests} ({totals.allowed_requests} allowed, {totals.denied_requests} denied)"
    yield f"  tokens       {totals.total_input_tokens} in + {totals.total_output_tokens} out"
    yield f"  cost         ${totals.total_estimated_cost:.4f}"
    yield f"  tool calls   {totals.total_tool_calls} ({totals.total_mcp_calls} mcp)"
    yield f"  file events  {totals.total_file_events}"
    for provider, model, calls, tin, tout, cost, _ in totals.ai_usage:
        yield f"  ai    {provider}/{model or '?'}: {calls} calls, {tin}+{tout} tokens, ${cost:.4f}"
    for tool, origin, calls, allowed, denied, errors, _ in totals.tool_usage:
        yield f"  tool  {tool} [{origin}]: {calls} calls ({allowed} allowed, {denied} denied, {errors} errors)"
    for server, calls, tools, *_ in totals.mcp_usage:
        yield f"  mcp   {server or '?'}: {calls} tool calls over {tools} tools"


def run_rollup(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    layout = home_layout()
    ref = resolve_session(args.session, home=layout)
    if ref.id is None:
        raise LedgerError(f"persistent VM {ref.name} is not recorded in main.db, so it has no totals to roll up",
                          layout.main_db)
    totals = rollup(layout.main_db, ref.id, ref.db_path)
    if args.json:
        obj = asdict(totals)
        obj.update(name=ref.name, ledger=str(ref.db_path), usage=usage_rows(layout.main_db, ref.id))
        del obj["ai_usage"], obj["tool_usage"], obj["mcp_usage"]
        json.dump(obj, out, indent=2)
        out.write("\n")
    else:
        out.write("\n".join(_totals_lines(ref, totals)) + "\n")
    return 0
