"""Events with durable cursors: every committed row of Capsem's event tables, exactly once.

The package owns reading a ledger's events page by page (``Ledger.events``) and following a
live ledger (``Ledger.follow``):

* :mod:`~capsem_core.events.tables` — which tables hold events, their time columns, and the
  one time scale pages merge on;
* :mod:`~capsem_core.events.cursor` — the cursor: per-table positions anchored on the rows
  they stand on, versioned, with an integrity check;
* :mod:`~capsem_core.events.limits` — a page's sizes and the follower's poll interval;
* :mod:`~capsem_core.events.reader` — ``EventReader``: a page in one read transaction,
  merged by time across tables, with each event's archived bodies; following by polling
  ``PRAGMA data_version``.

``capsem_core.sample.events`` is something else: it generates the events of sample ledgers.
"""

from __future__ import annotations

from capsem_core.lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from capsem_core.events.cursor import Mark
    from capsem_core.events.limits import DEFAULT_POLL_S, MAX_LIMIT, MIN_LIMIT, clamp_limit
    from capsem_core.events.reader import Event, EventPage, EventReader
    from capsem_core.events.tables import EVENT_TABLE_NAMES, EVENT_TABLES, EventTable, choose_tables
del TYPE_CHECKING

# Each public name and the module defining it: the tables and limits load without the
# reader's numpy (the command line builds ``events``'s arguments from them).
_HOMES: dict[str, str] = {
    "Mark": "cursor",
    **dict.fromkeys(("DEFAULT_POLL_S", "MAX_LIMIT", "MIN_LIMIT", "clamp_limit"), "limits"),
    **dict.fromkeys(("Event", "EventPage", "EventReader"), "reader"),
    **dict.fromkeys(("EVENT_TABLES", "EVENT_TABLE_NAMES", "EventTable", "choose_tables"), "tables"),
}

# Spelled out: type checkers read exports from a literal list only.
__all__ = [
    "DEFAULT_POLL_S",
    "EVENT_TABLES",
    "EVENT_TABLE_NAMES",
    "Event",
    "EventPage",
    "EventReader",
    "EventTable",
    "MAX_LIMIT",
    "MIN_LIMIT",
    "Mark",
    "choose_tables",
    "clamp_limit",
]
__getattr__, __dir__ = attach(globals(), _HOMES)
