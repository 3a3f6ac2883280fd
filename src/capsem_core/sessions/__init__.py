"""Sessions: where ledgers live, session identity, Capsem's main.db, the rollup and listing.

The package owns:

* :mod:`~capsem_core.sessions.home` — the paths of one Capsem home (``CAPSEM_HOME``,
  ``CAPSEM_RUN_DIR``, ``main.db``) and which words may name a session;
* :mod:`~capsem_core.sessions.resolve` — the one resolver from a word (session id or VM
  name) to a ledger directory, and registering a session with its VM name;
* :mod:`~capsem_core.sessions.vmnames` — capsem-core's sidecar linking VM names to ids;
* :mod:`~capsem_core.sessions.maindb` — Capsem's main.db (its layout, read by column name at
  any ``user_version``): open, create, insert, mark, rows;
* :mod:`~capsem_core.sessions.rollup` — a session's totals, recomputed from its ledger into
  main.db;
* :mod:`~capsem_core.sessions.listing` — listing sessions (their text and JSON forms are
  the command line's: :mod:`capsem_core.cli.sessions`).

The ``list`` and ``rollup`` commands are :mod:`capsem_core.cli.list` and
:mod:`capsem_core.cli.rollup`. The public names of the former modules
``capsem_core.sessions`` and ``capsem_core.maindb`` are importable from here, and the former
``capsem_core.vmnames`` is ``capsem_core.sessions.vmnames``.
"""

from __future__ import annotations

from capsem_core.paths import SESSION_BODIES, SESSION_DB
from capsem_core.sessions import vmnames
from capsem_core.sessions.home import (
    MAX_SESSION_WORD, Home, capsem_home, check_session_word, home_layout, is_session_word, main_db_path,
    run_dir, session_word_problem,
)
from capsem_core.sessions.listing import ListedSession, ListFilter, list_sessions
from capsem_core.sessions.maindb import (
    CHECK_COLUMNS, CREATED_AT_COLUMN, DOCTOR_COLUMNS, ID_COLUMN, LATEST_COLUMNS, LIST_COLUMNS, MAIN_DB_DDL,
    MAIN_DB_VERSION, ROLLUP_COLUMNS, SESSION_COLUMNS, USAGE_TABLES, SessionRow, create_main_db, insert_session,
    latest_session_id, mark_session, now_text, open_main_db, recent_sessions, select_rows_sql, session_recorded,
)
from capsem_core.sessions.resolve import (
    Kind, SessionRef, ledger_exists, locate_ledger, register_session, resolve_session, vm_name,
)
from capsem_core.sessions.rollup import SessionTotals, read_totals, rollup, rollup_on_close

__all__ = [
    "CHECK_COLUMNS", "CREATED_AT_COLUMN", "DOCTOR_COLUMNS", "Home", "ID_COLUMN", "Kind", "LATEST_COLUMNS",
    "LIST_COLUMNS", "ListFilter", "ListedSession", "MAIN_DB_DDL", "MAIN_DB_VERSION",
    "MAX_SESSION_WORD", "ROLLUP_COLUMNS", "SESSION_BODIES", "SESSION_COLUMNS", "SESSION_DB", "SessionRef",
    "SessionRow", "SessionTotals", "USAGE_TABLES", "capsem_home", "check_session_word", "create_main_db",
    "home_layout", "insert_session", "is_session_word", "latest_session_id", "ledger_exists", "list_sessions",
    "locate_ledger", "main_db_path", "mark_session", "now_text", "open_main_db", "read_totals",
    "recent_sessions", "register_session", "resolve_session", "rollup", "rollup_on_close", "run_dir",
    "select_rows_sql", "session_recorded", "session_word_problem", "vm_name", "vmnames",
]
