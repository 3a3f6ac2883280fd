"""The rollup: a session's totals recomputed from its ledger and written into main.db.

It is Capsem's ``record_session_stop`` without the status: one ``UPDATE sessions ... WHERE
id = ?`` of Capsem's own total columns, computed with Capsem's formulas from the session's
``session.db`` in one read snapshot. It never touches the usage tables, the schema or
``user_version``.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from capsem_core.errors import LedgerError, SchemaMismatch
from capsem_core.paths import SESSION_DB, is_regular_file, refuse_symlink
from capsem_core.sessions.maindb import (
    OPTIONAL_COUNTS, ROLLUP_COLUMNS, TOTAL_COLUMNS, as_float, as_int, connect, open_main_db, table_columns,
    writing,
)


@dataclass(frozen=True, slots=True)
class SessionTotals:
    """What a rollup wrote for one session. ``exec_count`` / ``audit_event_count`` are None
    when main.db has no such column (nothing was written); ``mcp_calls`` is never stored: it
    is counted from the ledger for display (None when ``tool_calls`` has no ``origin``)."""

    session_id: str
    total_requests: int
    allowed_requests: int
    denied_requests: int
    total_input_tokens: int
    total_output_tokens: int
    total_estimated_cost: float
    total_tool_calls: int
    total_file_events: int
    exec_count: int | None
    audit_event_count: int | None
    mcp_calls: int | None


_LEDGER_NEEDS: dict[str, tuple[str, ...]] = {
    "net_events": ("decision",),
    "model_calls": ("input_tokens", "output_tokens", "estimated_cost_usd"),
    "tool_calls": (),
    "fs_events": (),
}


def read_totals(ledger: Path, session_id: str, counts: Sequence[str] = ()) -> SessionTotals:
    """Capsem's rollup figures of one ledger, in one read snapshot. ``counts`` names the
    optional main.db columns (``exec_count``, ``audit_event_count``) to compute."""
    refuse_symlink(ledger, SESSION_DB)
    if not is_regular_file(ledger):
        raise LedgerError("session.db not found", ledger)
    conn = connect(ledger, readonly=True)
    try:
        conn.execute("BEGIN")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        needs = dict(_LEDGER_NEEDS)
        needs.update({OPTIONAL_COUNTS[c]: () for c in counts})
        for table, wanted in needs.items():
            if table not in tables:
                raise SchemaMismatch(f"ledger has no {table} table, so its totals cannot be rolled up", ledger)
            missing = [c for c in wanted if c not in set(table_columns(conn, table))]
            if missing:
                raise SchemaMismatch(f"ledger table {table} lacks column(s) {', '.join(missing)}", ledger)
        totals = totals_on(conn, session_id, counts)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read the ledger's totals: {exc}", ledger) from exc
    except TotalUnfit as exc:
        raise TotalUnfit(f"cannot read the ledger's totals: {exc.detail}", ledger) from None
    finally:
        conn.close()
    return totals


def totals_on(conn: sqlite3.Connection, session_id: str, counts: Sequence[str] = ()) -> SessionTotals:
    """Capsem's rollup formulas (``record_session_stop``'s) on an open ledger connection, in
    whatever read transaction it holds: the one place they are written. ``check``'s route
    identity compares main.db with these on its own snapshot."""

    def one(sql: str) -> object:
        value: object = conn.execute(sql).fetchone()[0]
        return value

    req = one("SELECT COUNT(*) FROM net_events")
    allowed = one("SELECT COUNT(*) FROM net_events WHERE decision = 'allowed'")
    denied = one("SELECT COUNT(*) FROM net_events WHERE decision = 'denied'")
    tin = _whole("input_tokens", one("SELECT COALESCE(SUM(input_tokens), 0) FROM model_calls"))
    tout = _whole("output_tokens", one("SELECT COALESCE(SUM(output_tokens), 0) FROM model_calls"))
    cost = _finite("estimated_cost_usd", one("SELECT COALESCE(SUM(estimated_cost_usd), 0.0) FROM model_calls"))
    tools = one("SELECT COUNT(*) FROM tool_calls")
    files = one("SELECT COUNT(*) FROM fs_events")
    extra = {c: as_int(one(f"SELECT COUNT(*) FROM {OPTIONAL_COUNTS[c]}")) for c in counts}
    mcp = (as_int(one("SELECT COUNT(*) FROM tool_calls WHERE origin = 'mcp'"))
           if "origin" in set(table_columns(conn, "tool_calls")) else None)
    return SessionTotals(session_id, as_int(req), as_int(allowed), as_int(denied), as_int(tin), as_int(tout),
                         as_float(cost), as_int(tools), as_int(files), extra.get("exec_count"),
                         extra.get("audit_event_count"), mcp)


class TotalUnfit(LedgerError):
    """A sum of the ledger that main.db's column cannot hold as Capsem computes it (a token
    sum past 64 bits or not whole, a cost that is not finite): refused, never written as 0."""


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _whole(column: str, value: object) -> object:
    """A token sum as main.db's INTEGER column holds it; TotalUnfit when it cannot."""
    if isinstance(value, float):
        if not (value.is_integer() and _INT64[0] <= value <= _INT64[1]):
            raise TotalUnfit(f"model_calls.{column} sums to {value!r}, which main.db's INTEGER total cannot hold")
        return int(value)
    return value


def _finite(column: str, value: object) -> object:
    """A cost sum as main.db's REAL column holds it; TotalUnfit when it is not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TotalUnfit(f"model_calls.{column} sums to {value!r}, which is not a cost main.db can hold")
    return value


def rollup(main_db_path: os.PathLike[str] | str, session_id: str,
           ledger_db_path: os.PathLike[str] | str) -> SessionTotals:
    """Recompute Capsem's totals of ``session_id`` from its ledger and write them over
    main.db's in one ``UPDATE sessions ... WHERE id = ?``.

    Only Capsem's own total columns change (and ``exec_count`` / ``audit_event_count`` where
    the file has them); status, stopped_at, the usage tables, the schema and user_version are
    left alone. Running it twice gives the same numbers. A main.db that cannot be written
    (read-only, locked past the busy timeout) or an unknown id is a LedgerError."""
    path = Path(main_db_path)
    conn, have = open_main_db(path, readonly=False, need=ROLLUP_COLUMNS)
    conn.close()
    counts = [c for c in OPTIONAL_COUNTS if c in have]
    totals = read_totals(Path(ledger_db_path), session_id, counts)
    values: dict[str, object] = {c: getattr(totals, c) for c in (*TOTAL_COLUMNS, *counts)}
    sql = (f"UPDATE sessions SET {', '.join(f'{c} = ?' for c in values)} WHERE id = ?")
    with writing(connect(path, readonly=False), path, f"cannot write the rollup of session {session_id}") as conn:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(sql, (*values.values(), session_id))
        if cur.rowcount != 1:
            conn.execute("ROLLBACK")
            raise LedgerError(f"session {session_id!r} is not registered, so it has no totals to roll up"
                              if cur.rowcount < 1 else
                              f"session {session_id!r} has {cur.rowcount} rows in main.db (its id is not unique); "
                              "not rolled up", path)
        conn.execute("COMMIT")
    return totals


class ClosedLedger(Protocol):
    """What ``rollup_on_close``'s callback needs of the writer it is handed."""

    @property
    def db_path(self) -> Path: ...


def rollup_on_close(main_db_path: os.PathLike[str] | str,
                    session_id: str) -> Callable[[ClosedLedger], None]:
    """A callback for ``LedgerWriter(..., on_close=...)``: rolls the session up from the
    writer's ``db_path`` once the ledger is closed."""
    main_db = Path(main_db_path)

    def _on_close(writer: ClosedLedger) -> None:
        rollup(main_db, session_id, writer.db_path)

    return _on_close
