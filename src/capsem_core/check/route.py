"""Route identity (the identity graph's invariant 8): main.db's figures for a session against
the ledger they were rolled up from.

The specification names "the wrong session's figures" as the symptom of a route identity bug.
When ``check`` reaches a ledger through a home (``check SESSION``, or the latest session), the
``sessions`` row main.db holds for that id is read, and for a session whose status is
``stopped`` (Capsem rolled it up when it stopped) every total column is compared with what
Capsem's rollup formulas (``capsem_core.sessions.totals.totals_on``, the one place they are
written) compute from the ledger, on the checks' own snapshot. A session still running, or
``crashed`` (it never ran its stop path, so it keeps the zeros of a session never rolled up),
is not compared, and the section says so; so is a ledger named with ``--db`` alone, which has
no home.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import NamedTuple

from capsem_core.check.report import NOTE, WARNING, CheckResult, Finding, Value
from capsem_core.errors import LedgerError

STOPPED = "stopped"
# A rolled-up cost is the same SQL SUM over the same rows; the tolerance only absorbs a REAL's
# round trip through another writer's text or driver.
COST_REL_TOLERANCE = 1e-9


class SessionRoute(NamedTuple):
    """How ``check`` reached a ledger: through the home whose main.db is ``main_db``, under the
    session id ``session_id`` (None when the home records no id for the VM's directory)."""

    main_db: Path
    session_id: str | None


class RouteRow(NamedTuple):
    """What main.db records for the session: its status and its total columns (those present)."""

    status: str | None
    totals: dict[str, Value]


def read_route(route: SessionRoute | None) -> tuple[RouteRow | None, str | None]:
    """(main.db's row for the route's session, None) or (None, why there is none to compare)."""
    if route is None:
        return None, ("there is no home: the ledger was named with --db, or found outside a home, "
                      "so main.db is not read")
    if route.session_id is None:
        return None, "main.db records no session id for this VM's ledger directory"
    if not route.main_db.exists():
        return None, f"the home has no main.db ({route.main_db})"
    # main.db's reader is loaded only for a ledger reached through a home: ``check --db`` and
    # the library's own checks never pay its import.
    from capsem_core.sessions.maindb import OPTIONAL_COUNTS, TOTAL_COLUMNS, open_main_db

    try:
        conn, have = open_main_db(route.main_db, need=("id", "status", *TOTAL_COLUMNS))
    except LedgerError as exc:
        return None, f"{UNREADABLE}{exc}"
    columns = [*TOTAL_COLUMNS, *(c for c in OPTIONAL_COUNTS if c in have)]
    try:
        row = conn.execute(f"SELECT status, {', '.join(columns)} FROM sessions WHERE id = ?",
                           (route.session_id,)).fetchone()
    except sqlite3.Error as exc:
        return None, f"{UNREADABLE}{exc}"
    finally:
        conn.close()
    if row is None:
        return None, f"main.db records no session {route.session_id}"
    status = row[0] if isinstance(row[0], str) else None
    return RouteRow(status, dict(zip(columns, row[1:]))), None


# How read_route begins its reason when main.db is there but cannot be read.
UNREADABLE = "main.db cannot be read: "


def session_stopped(row: RouteRow | None) -> bool | None:
    """True when main.db says the session stopped cleanly, False when it says otherwise,
    None when there is no main.db row to say."""
    return None if row is None else row.status == STOPPED


def _differs(column: str, recorded: Value, computed: int | float) -> bool:
    from capsem_core.sessions.maindb import as_float, as_int

    if column == "total_estimated_cost":
        return not math.isclose(as_float(recorded), float(computed), rel_tol=COST_REL_TOLERANCE, abs_tol=1e-12)
    # A value that is not a number (a damaged or hostile main.db) is read as 0, as list does.
    return as_int(recorded) != computed


def check_route(conn: sqlite3.Connection, route: SessionRoute | None, row: RouteRow | None, why: str | None,
                result: CheckResult) -> None:
    """Invariant 8 on ``conn`` (the checks' snapshot of the ledger) against main.db's row."""
    if why is not None and why.startswith(UNREADABLE):
        # As `check SESSION` fails when main.db cannot be read, the comparison it owes is not
        # quietly dropped here either (`check --all` reaches main.db only through this).
        result.counts["route_compared"] = 0
        result.add(Finding("route_main_db_unreadable", WARNING, f"Route identity not checked: {why}",
                           location={"file": str(route.main_db) if route is not None else None}))
        return
    if row is None or route is None or route.session_id is None:
        _not_compared(result, why or "main.db has no row for this session")
        return
    session = route.session_id
    result.counts["route_status"] = row.status
    if row.status != STOPPED:
        state = row.status or "of no status"
        reason = ("it crashed: it never ran its stop path, so main.db keeps the zeros of a session never "
                  "rolled up" if row.status == "crashed" else
                  "it is still running: main.db carries the totals of its last update, not a rollup")
        _not_compared(result, f"session {session} is {state} in main.db, so its totals are not compared ({reason})"
                      if row.status in ("running", "crashed") else
                      f"session {session} is {state} in main.db, not stopped, so its totals are not compared")
        return
    from capsem_core.sessions.maindb import OPTIONAL_COUNTS
    from capsem_core.sessions.totals import TotalUnfit, totals_on

    counts = [c for c in OPTIONAL_COUNTS if c in row.totals]
    try:
        ledger = totals_on(conn, session, counts)
    except TotalUnfit as exc:
        _not_compared(result, f"the ledger's totals cannot be rolled up: {exc.detail}")
        return
    differing: list[dict[str, Value]] = []
    for column, recorded in row.totals.items():
        computed = getattr(ledger, column)
        if _differs(column, recorded, computed):
            differing.append({"column": column, "main_db": recorded, "ledger": computed})
    result.counts["route_compared"] = len(row.totals)
    result.counts["route_totals_differ"] = len(differing)
    if differing:
        shown = ", ".join(f"{d['column']} {d['main_db']} in main.db, {d['ledger']} from the ledger"
                          for d in differing)
        result.add(Finding("route_totals_differ", WARNING,
                           f"main.db's totals for session {session} are not what its ledger rolls up to (the wrong "
                           f"session's figures?): {shown}", count=len(differing), examples=differing))


def _not_compared(result: CheckResult, why: str) -> None:
    result.counts["route_compared"] = 0
    result.add(Finding("route_not_compared", NOTE, f"Route identity not checked: {why}"))


__all__ = ["COST_REL_TOLERANCE", "STOPPED", "RouteRow", "SessionRoute", "check_route", "read_route", "session_stopped"]
