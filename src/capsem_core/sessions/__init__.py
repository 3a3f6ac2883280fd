"""Sessions: where ledgers live, session identity, Capsem's main.db, the rollup and listing.

The package owns:

* :mod:`~capsem_core.sessions.home` — the paths of one Capsem home (``CAPSEM_HOME``,
  ``CAPSEM_RUN_DIR``, ``main.db``) and which words may name a session;
* :mod:`~capsem_core.sessions.resolve` — the one resolver from a word (session id or VM
  name) to a ledger directory, and registering a session with its VM name;
* :mod:`~capsem_core.sessions.vmnames` — capsem-core's sidecar linking VM names to ids;
* :mod:`~capsem_core.sessions.maindb` — Capsem's main.db (its layout, read by column name at
  any ``user_version``): open, create, insert, mark, rows;
* :mod:`~capsem_core.sessions.totals` — a session's totals, recomputed from its ledger into
  main.db;
* :mod:`~capsem_core.sessions.listing` — listing sessions (their text and JSON forms are
  the command line's: :mod:`capsem_core.cli.sessions`).

The ``list`` and ``rollup`` commands are :mod:`capsem_core.cli.list` and
:mod:`capsem_core.cli.rollup`. The public names of the former modules
``capsem_core.sessions`` and ``capsem_core.maindb`` are importable from here, and the former
``capsem_core.vmnames`` is ``capsem_core.sessions.vmnames``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capsem_core.sessions import vmnames
    from capsem_core.sessions.home import (
        Home, MAX_SESSION_WORD, capsem_home, check_session_word, home_layout, is_session_word,
        main_db_path, run_dir, session_word_problem,
    )
    from capsem_core.sessions.listing import ListFilter, ListedSession, list_sessions
    from capsem_core.sessions.maindb import (
        CHECK_COLUMNS, CREATED_AT_COLUMN, DOCTOR_COLUMNS, ID_COLUMN, LATEST_COLUMNS, LIST_COLUMNS,
        MAIN_DB_DDL, MAIN_DB_VERSION, ROLLUP_COLUMNS, SESSION_COLUMNS, SessionRow, USAGE_TABLES,
        create_main_db, insert_session, latest_session_id, mark_session, now_text, open_main_db,
        recent_sessions, select_rows_sql, session_recorded,
    )
    from capsem_core.sessions.resolve import (
        Kind, SessionRef, ledger_exists, locate_ledger, register_session, resolve_session, vm_name,
    )
    from capsem_core.sessions.totals import SessionTotals, read_totals, rollup, rollup_on_close
    from capsem_core.paths import SESSION_BODIES, SESSION_DB


# Each public name and the module that defines it: loaded when first used (PEP 562), so a
# command pays only for the parts of this package it touches.
_HOMES: dict[str, str] = {
    "CHECK_COLUMNS": "capsem_core.sessions.maindb",
    "CREATED_AT_COLUMN": "capsem_core.sessions.maindb",
    "DOCTOR_COLUMNS": "capsem_core.sessions.maindb",
    "Home": "capsem_core.sessions.home",
    "ID_COLUMN": "capsem_core.sessions.maindb",
    "Kind": "capsem_core.sessions.resolve",
    "LATEST_COLUMNS": "capsem_core.sessions.maindb",
    "LIST_COLUMNS": "capsem_core.sessions.maindb",
    "ListFilter": "capsem_core.sessions.listing",
    "ListedSession": "capsem_core.sessions.listing",
    "MAIN_DB_DDL": "capsem_core.sessions.maindb",
    "MAIN_DB_VERSION": "capsem_core.sessions.maindb",
    "MAX_SESSION_WORD": "capsem_core.sessions.home",
    "ROLLUP_COLUMNS": "capsem_core.sessions.maindb",
    "SESSION_BODIES": "capsem_core.paths",
    "SESSION_COLUMNS": "capsem_core.sessions.maindb",
    "SESSION_DB": "capsem_core.paths",
    "SessionRef": "capsem_core.sessions.resolve",
    "SessionRow": "capsem_core.sessions.maindb",
    "SessionTotals": "capsem_core.sessions.totals",
    "USAGE_TABLES": "capsem_core.sessions.maindb",
    "capsem_home": "capsem_core.sessions.home",
    "check_session_word": "capsem_core.sessions.home",
    "create_main_db": "capsem_core.sessions.maindb",
    "home_layout": "capsem_core.sessions.home",
    "insert_session": "capsem_core.sessions.maindb",
    "is_session_word": "capsem_core.sessions.home",
    "latest_session_id": "capsem_core.sessions.maindb",
    "ledger_exists": "capsem_core.sessions.resolve",
    "list_sessions": "capsem_core.sessions.listing",
    "locate_ledger": "capsem_core.sessions.resolve",
    "main_db_path": "capsem_core.sessions.home",
    "mark_session": "capsem_core.sessions.maindb",
    "now_text": "capsem_core.sessions.maindb",
    "open_main_db": "capsem_core.sessions.maindb",
    "read_totals": "capsem_core.sessions.totals",
    "recent_sessions": "capsem_core.sessions.maindb",
    "register_session": "capsem_core.sessions.resolve",
    "resolve_session": "capsem_core.sessions.resolve",
    "rollup": "capsem_core.sessions.totals",
    "rollup_on_close": "capsem_core.sessions.totals",
    "run_dir": "capsem_core.sessions.home",
    "select_rows_sql": "capsem_core.sessions.maindb",
    "session_recorded": "capsem_core.sessions.maindb",
    "session_word_problem": "capsem_core.sessions.home",
    "vm_name": "capsem_core.sessions.resolve",
}

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


def __getattr__(name: str) -> Any:
    if name == "vmnames":
        return importlib.import_module("capsem_core.sessions.vmnames")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
