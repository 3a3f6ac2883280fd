"""Which tables hold events, what each one's time column is, and one time scale to merge them on.

An event table is a v2 table whose rows carry an ``event_id`` and a time: ``timestamp``
(RFC 3339 text) or ``timestamp_unix_ms`` (an integer). ``tool_responses`` (no time column),
``profile_mutation_events`` (its id is ``mutation_id``), the body index and the markers are
not event tables. The tuple is fixed, in the schema's creation order, because the cursor
names a table by its place in it (a new table means a new cursor version);
``tests/events/test_tables.py`` checks it against :mod:`capsem_core.schema`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from capsem_core import schema
from capsem_core.writer.rows import ledger_timestamp

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)
# Milliseconds a ledger_timestamp can render (years 1970..9999); anything else is shown as it is.
_MAX_MS = 253_402_300_799_999


@dataclass(frozen=True, slots=True)
class EventTable:
    """One event table: its name, its time column and whether Capsem archives bodies for it."""

    name: str
    time_column: str
    has_bodies: bool

    @property
    def time_is_ms(self) -> bool:
        """True for ``timestamp_unix_ms`` tables, False for RFC 3339 ``timestamp`` text."""
        return self.time_column == "timestamp_unix_ms"


def _table(name: str, time_column: str = "timestamp") -> EventTable:
    return EventTable(name, time_column, name in schema.BODY_SOURCE_TABLES)


EVENT_TABLES: tuple[EventTable, ...] = (
    _table("net_events"), _table("model_calls"), _table("tool_calls"), _table("model_items"),
    _table("fs_events"), _table("exec_events"), _table("dns_events"), _table("audit_events"),
    _table("substitution_events"), _table("security_rule_events", "timestamp_unix_ms"),
    _table("security_decision_events", "timestamp_unix_ms"), _table("security_ask_events", "timestamp_unix_ms"),
    _table("transport_events", "timestamp_unix_ms"),
)
EVENT_TABLE_NAMES: tuple[str, ...] = tuple(t.name for t in EVENT_TABLES)
_BY_NAME = {t.name: t for t in EVENT_TABLES}
# Where each table stands in EVENT_TABLES: the cursor's table number, and the merge's tie-break.
TABLE_NUMBER: dict[str, int] = {t.name: i for i, t in enumerate(EVENT_TABLES)}


def choose_tables(tables: Iterable[str] | str | None) -> tuple[EventTable, ...]:
    """The event tables a caller asked for, in EVENT_TABLES order, each once; all for None.

    A single name may be given as a string. Raises ValueError for an empty choice or a name
    that is not an event table (saying which are).
    """
    if tables is None:
        return EVENT_TABLES
    names = {tables} if isinstance(tables, str) else set(tables)
    if not names:
        raise ValueError("choose at least one event table (or None for all of them)")
    unknown = sorted(n for n in names if n not in _BY_NAME)
    if unknown:
        raise ValueError(f"not an event table: {', '.join(map(repr, unknown))}; the event tables are "
                         + ", ".join(EVENT_TABLE_NAMES))
    return tuple(t for t in EVENT_TABLES if t.name in names)


def text_time_us(value: object) -> int | None:
    """Microseconds since the epoch of an RFC 3339 ``timestamp`` (no offset means UTC); None
    when the value is not such a text (a hostile row may hold anything)."""
    if type(value) is not str:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // _ONE_US


def ms_time_us(value: object) -> int | None:
    """Microseconds since the epoch of a ``timestamp_unix_ms``; None when it is not an integer."""
    return value * 1000 if type(value) is int else None


def shown_time(table: EventTable, value: object, stamp: Callable[[float], str] = ledger_timestamp) -> str:
    """An event's time as text: the stored RFC 3339 text as it is, or a ``timestamp_unix_ms``
    rendered the way the writer stamps text times (``YYYY-MM-DDTHH:MM:SS.ffffffZ``; ``stamp``
    may be a ``writer.rows.Stamper``, which formats each second's prefix once)."""
    if table.time_is_ms and type(value) is int and 0 <= value <= _MAX_MS:
        return stamp(value / 1000)
    if value is None:
        return ""
    return value if type(value) is str else str(value)


__all__ = ["EVENT_TABLES", "EVENT_TABLE_NAMES", "EventTable", "TABLE_NUMBER", "choose_tables", "ms_time_us",
           "shown_time", "text_time_us"]
