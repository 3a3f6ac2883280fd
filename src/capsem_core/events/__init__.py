"""Events with durable cursors: every committed row of Capsem's event tables, exactly once.

The package owns reading a ledger's events page by page (``Ledger.events``) and following a
live ledger (``Ledger.follow``):

* :mod:`~capsem_core.events.tables` — which tables hold events, their time columns, and the
  one time scale pages merge on;
* :mod:`~capsem_core.events.cursor` — the cursor: per-table positions anchored on the rows
  they stand on, versioned, with an integrity check;
* :mod:`~capsem_core.events.reader` — ``EventReader``: a page in one read transaction,
  merged by time across tables, with each event's archived bodies; following by polling
  ``PRAGMA data_version``.

``capsem_core.sample.events`` is something else: it generates the events of sample ledgers.
"""

from __future__ import annotations

from capsem_core.events.cursor import Mark
from capsem_core.events.reader import (
    DEFAULT_POLL_S, MAX_LIMIT, MIN_LIMIT, Event, EventPage, EventReader, clamp_limit,
)
from capsem_core.events.tables import EVENT_TABLE_NAMES, EVENT_TABLES, EventTable, choose_tables

__all__ = [
    "DEFAULT_POLL_S", "EVENT_TABLES", "EVENT_TABLE_NAMES", "Event", "EventPage", "EventReader", "EventTable",
    "MAX_LIMIT", "MIN_LIMIT", "Mark", "choose_tables", "clamp_limit",
]
