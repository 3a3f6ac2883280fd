"""The bench baseline: ``Ledger.events`` as it was before it read pages of rows natively
(``capsem_core.events.reader`` up to the columns work), kept here unchanged but for this
paragraph so bench_scan.py measures today's reader against it in the same run. A row is a
tuple from the sqlite3 module, a dict and an ``Event``, merged with heapq; nothing in the
package imports this.

Pages of events with durable cursors, read in one snapshot of ``session.db``, and following.

``EventReader`` owns one read-only connection (``capsem_core.db``) of its own, so its read
transactions are its alone. A page is read inside one transaction: the latest position of
every event table, the cursor's check against the rows it stands on, each chosen table's
rows after its position in id order (merged across tables by time), and the names of their
archived bodies. SQLite has one writer at a time and AUTOINCREMENT never hands out an id
twice, so a row committed after a snapshot always has a higher id than every row of that
table the snapshot shows: a per-table position is therefore enough for every committed row
to be delivered exactly once, however the writer's commits fall between pages.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from capsem_core import db, schema
from capsem_core.errors import CursorError, LedgerError
from capsem_core.events import cursor as _cursor
from capsem_core.events.cursor import Mark
from capsem_core.writer.rows import Stamper
from capsem_core.events.tables import (
    EVENT_TABLES, TABLE_NUMBER, EventTable, choose_tables, ms_time_us, shown_time, text_time_us,
)

MIN_LIMIT = 1
MAX_LIMIT = 1000
# A page also ends once the values it delivers pass this many bytes (after its first event),
# and no single row may be larger: a hostile ledger's huge rows cannot size the memory.
PAGE_BYTES = 32 << 20
ROW_BYTES = 32 << 20
DEFAULT_POLL_S = 0.05

Value = int | float | str | bytes | None
After = str  # "start", "latest" or a cursor's text

_DIRECTION_ORDER = {d: i for i, d in enumerate(schema.BODY_DIRECTIONS)}
TIME_COLUMN = {t.name: t.time_column for t in EVENT_TABLES}


@dataclass(frozen=True, slots=True, eq=True)
class Event:
    """One row of an event table, as a page delivers it.

    ``table`` and ``id`` say which row; ``event_id`` is the row's event id and ``timestamp``
    its time as RFC 3339 text (a ``timestamp_unix_ms`` table's integer rendered as
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; the stored value is in ``row``). ``row`` maps every column
    to its stored value; ``bodies`` names the row's archived bodies by direction (``request``,
    ``response``, ``payload``, ``stdout``, ``stderr``), each readable with
    ``Ledger.read_body(event_id, table, direction)``.
    """

    table: str
    id: int
    event_id: str
    timestamp: str
    row: dict[str, Value] = field(hash=False)
    bodies: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page: ``events`` in time order (id order within a table), ``cursor`` the opaque
    text to pass back as ``after`` for the next page, and ``caught_up`` True when no row of
    the chosen tables committed at the time of the page is left after it."""

    events: list[Event]
    cursor: str
    caught_up: bool
    before: Mapping[str, Mark] = field(default_factory=dict, repr=False, compare=False)

    def cursor_at(self, count: int) -> str:
        """The cursor after only the first ``count`` events of this page (``cursor`` itself
        for all of them): for a caller that stops part-way through a page, so that resuming
        delivers the rest exactly once. ``before`` is where the page started."""
        if not 0 <= count <= len(self.events):
            raise ValueError(f"a page of {len(self.events)} events has no cursor after {count}")
        if count == len(self.events):
            return self.cursor
        marks = dict(self.before)
        for event in self.events[:count]:
            column = TIME_COLUMN[event.table]
            marks[event.table] = Mark(event.id, _cursor.anchor_of(event.row.get("event_id"), event.row.get(column)))
        return _cursor.encode(marks)


def clamp_limit(limit: int) -> int:
    """A page's size: ``limit`` clamped to 1..1000 (TypeError for a non-integer)."""
    if type(limit) is not int:
        raise TypeError(f"limit must be an integer, not {type(limit).__name__}")
    return min(max(limit, MIN_LIMIT), MAX_LIMIT)


def _direction_key(direction: str) -> tuple[int, str]:
    return _DIRECTION_ORDER.get(direction, len(_DIRECTION_ORDER)), direction


def _event(t: EventTable, row_id: int, row: dict[str, Value], bodies: Mapping[tuple[str, object], list[str]],
           stamp: Stamper) -> Event:
    event_id = row["event_id"]
    found = bodies.get((t.name, event_id), ())
    directions = tuple(found) if len(found) < 2 else tuple(sorted(found, key=_direction_key))
    return Event(t.name, row_id, event_id if type(event_id) is str else str(event_id),
                 shown_time(t, row[t.time_column], stamp), row, directions)


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class EventReader:
    """Reads pages of events from one ledger's session.db (see the module docstring).

    ``Ledger.events`` and ``Ledger.follow`` are the public way in; a reader is opened by
    the Ledger on first use and closed with it. Thread-safe: pages are read one at a time.
    """

    def __init__(self, db_path: os.PathLike[str] | str):
        self.db_path = os.fspath(db_path)
        # Autocommit, so BEGIN and COMMIT are this reader's own: one snapshot per page.
        self._conn = db.connect_readonly(self.db_path, isolation_level=None)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, ROW_BYTES)
        self._lock = threading.Lock()
        self._closed = False
        self._data_version = -1
        self._selects: dict[str, str] = {}
        self._stamp = Stamper()
        self._latest_sql = "SELECT " + ", ".join(
            f"(SELECT MAX(id) FROM {t.name}), (SELECT seq FROM sqlite_sequence WHERE name = '{t.name}')"
            for t in EVENT_TABLES)

    def close(self) -> None:
        """Release the connection (idempotent)."""
        with self._lock:
            self._closed = True
            self._conn.close()

    def _live(self) -> None:
        if self._closed:
            raise LedgerError("ledger is closed: open it again to read its events", self.db_path)

    # -- one page ------------------------------------------------------------------------

    def page(self, tables: Iterable[str] | str | None = None, after: After = "start", limit: int = 100) -> EventPage:
        """The next page of events after ``after`` (see ``Ledger.events``)."""
        chosen = choose_tables(tables)
        size = clamp_limit(limit)
        if not isinstance(after, str):
            raise TypeError(f"after must be 'start', 'latest' or a cursor's text, not {type(after).__name__}")
        marks = None if after == "latest" else dict(_cursor.START) if after == "start" else _cursor.decode(
            after, self.db_path)
        with self._lock:
            self._live()
            try:
                try:
                    return self._in_snapshot(chosen, marks, size)
                except sqlite3.OperationalError as exc:
                    if "decode" not in str(exc) or self._conn.text_factory is not str:
                        raise
                # Text that is not UTF-8 (a hostile or damaged row) is kept byte for byte as
                # surrogate escapes, from now on for this reader, instead of failing the page.
                self._conn.text_factory = _lenient_text
                return self._in_snapshot(chosen, marks, size)
            except sqlite3.DataError as exc:
                raise LedgerError(f"an event row holds a value larger than the {ROW_BYTES >> 20} MiB an events "
                                  f"page takes ({exc})", self.db_path) from None
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"cannot read events: {exc}", self.db_path) from None

    def _in_snapshot(self, chosen: tuple[EventTable, ...], marks: dict[str, Mark] | None, size: int) -> EventPage:
        self._conn.execute("BEGIN")
        try:
            return self._read(chosen, marks, size)
        finally:
            self._conn.execute("COMMIT")

    def _read(self, chosen: tuple[EventTable, ...], marks: dict[str, Mark] | None, size: int) -> EventPage:
        conn = self._conn
        latest = self._latest_positions()
        if marks is None:  # "latest": every table stands at its last committed row
            marks = {t.name: self._mark_at(t, latest[t.name]) for t in EVENT_TABLES if latest[t.name]}
            return EventPage([], _cursor.encode(marks), True)
        self._check_marks(marks, latest)
        streams = []
        cursors = []
        names: dict[str, tuple[str, ...]] = {}
        for t in chosen:
            after_id = marks[t.name].position if t.name in marks else 0
            if after_id < latest[t.name]:
                cur = conn.execute(self._select_sql(t), (after_id, size))
                cursors.append(cur)
                names[t.name] = tuple(d[0] for d in cur.description[:-1])
                streams.append(self._stream(t, cur, names[t.name]))
        taken: list[tuple[EventTable, int, tuple[Any, ...]]] = []
        spent = 0
        try:
            for _key, _number, row_id, t, values, row_bytes in heapq.merge(*streams):
                taken.append((t, row_id, values))
                spent += row_bytes
                if len(taken) == size or spent >= PAGE_BYTES:
                    break
        finally:
            for cur in cursors:
                cur.close()
        return self._finish(chosen, marks, latest, taken, names)

    def _select_sql(self, t: EventTable) -> str:
        sql = self._selects.get(t.name)
        if sql is None:
            # The row's size is summed by SQLite, in C, as one extra column: the page's byte
            # budget costs no Python loop over the values.
            columns = [r[1] for r in self._conn.execute(f"PRAGMA table_info({t.name})")]
            size = " + ".join(f'ifnull(length("{c}"), 0)' for c in columns)
            sql = f"SELECT *, {size} FROM {t.name} WHERE id > ? ORDER BY id LIMIT ?"
            self._selects[t.name] = sql
        return sql

    def _latest_positions(self) -> dict[str, int]:
        # Both MAX(id) and sqlite_sequence: the larger is the last id handed out (a row deleted
        # at the end leaves only the sequence; a hostile file may lack the sequence row).
        row = self._conn.execute(self._latest_sql).fetchone()
        out = {}
        for i, t in enumerate(EVENT_TABLES):
            values = [v for v in row[2 * i:2 * i + 2] if type(v) is int]
            out[t.name] = max(values, default=0)
        return out

    def _mark_at(self, t: EventTable, position: int) -> Mark:
        if position == 0:
            return Mark(0)
        found = self._conn.execute(f"SELECT event_id, {t.time_column} FROM {t.name} WHERE id = ?",
                                   (position,)).fetchone()
        return Mark(position, None if found is None else _cursor.anchor_of(*found))

    def _check_marks(self, marks: Mapping[str, Mark], latest: Mapping[str, int]) -> None:
        by_name = {t.name: t for t in EVENT_TABLES}
        for name, mark in marks.items():
            if mark.position > latest[name]:
                raise CursorError(f"the cursor stands at row {mark.position} of {name}, but the ledger's last row "
                                  f"there is {latest[name]}: it is a cursor of another ledger (or of a later copy "
                                  "of this one)", self.db_path)
            if self._mark_at(by_name[name], mark.position).anchor != mark.anchor:
                raise CursorError(f"the cursor is of another ledger: row {mark.position} of {name} is not the row "
                                  "it was taken at", self.db_path)

    @staticmethod
    def _stream(t: EventTable, cur: sqlite3.Cursor,
                columns: tuple[str, ...]) -> Iterator[tuple[int, int, int, EventTable, tuple[Any, ...], int]]:
        # Items sort by (time, table number, id): the values themselves are never compared.
        id_at, time_at = columns.index("id"), columns.index(t.time_column)
        to_us = ms_time_us if t.time_is_ms else text_time_us
        number = TABLE_NUMBER[t.name]
        key = 0
        for values in cur:
            # A row whose time cannot be read keeps the place of the row before it.
            us = to_us(values[time_at])
            if us is not None:
                key = us
            yield key, number, values[id_at], t, values[:-1], values[-1]

    def _finish(self, chosen: tuple[EventTable, ...], marks: dict[str, Mark], latest: Mapping[str, int],
                taken: list[tuple[EventTable, int, tuple[Any, ...]]],
                names: Mapping[str, tuple[str, ...]]) -> EventPage:
        conn = self._conn
        last: dict[str, tuple[int, tuple[Any, ...]]] = {}
        for t, row_id, values in taken:
            last[t.name] = (row_id, values)
        bodies: dict[tuple[str, object], list[str]] = {}
        for t in chosen:
            if t.has_bodies and t.name in last:
                first = marks[t.name].position if t.name in marks else 0
                for event_id, direction in conn.execute(
                        "SELECT event_id, direction FROM event_body_blobs WHERE source_table = ? AND event_id IN "
                        f"(SELECT event_id FROM {t.name} WHERE id > ? AND id <= ?)",
                        (t.name, first, last[t.name][0])):
                    bodies.setdefault((t.name, event_id), []).append(str(direction))
        new_marks = dict(marks)
        caught_up = True
        for t in chosen:
            mark = marks.get(t.name, Mark(0))
            if t.name in last:
                row_id, values = last[t.name]
                columns = names[t.name]
                mark = Mark(row_id, _cursor.anchor_of(values[columns.index("event_id")],
                                                      values[columns.index(t.time_column)]))
            if mark.position < latest[t.name]:
                # Nothing left up to the latest id (rows deleted at the end): stand there.
                left = conn.execute(f"SELECT 1 FROM {t.name} WHERE id > ? AND id <= ? LIMIT 1",
                                    (mark.position, latest[t.name])).fetchone()
                if left is None:
                    mark = self._mark_at(t, latest[t.name])
                else:
                    caught_up = False
            new_marks[t.name] = mark
        events = [_event(t, row_id, dict(zip(names[t.name], values)), bodies, self._stamp)
                  for t, row_id, values in taken]
        return EventPage(events, _cursor.encode(new_marks), caught_up, marks)

    # -- following -----------------------------------------------------------------------

    def changed(self) -> bool:
        """True when another connection committed since the last call (``PRAGMA data_version``,
        a read of the connection's own state: cheap enough to poll many times a second)."""
        with self._lock:
            self._live()
            try:
                (version,) = self._conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"cannot read events: {exc}", self.db_path) from None
            seen, self._data_version = self._data_version, version
            return bool(version != seen)

    def follow(self, tables: Iterable[str] | str | None = None, after: After = "start", limit: int = MAX_LIMIT,
               poll: float = DEFAULT_POLL_S, stop: Callable[[], bool] | None = None) -> Iterator[EventPage]:
        """Pages as rows are committed, forever, or until ``stop()`` is true (see ``Ledger.follow``).

        The tables, ``after`` and ``limit`` are checked now, not at the first page."""
        names = [t.name for t in choose_tables(tables)]
        clamp_limit(limit)
        if after not in ("start", "latest"):
            _cursor.decode(after, self.db_path)
        return self._follow(names, after, limit, poll, stop)

    def _follow(self, names: list[str], after: After, limit: int, poll: float,
                stop: Callable[[], bool] | None) -> Iterator[EventPage]:
        position = after
        while stop is None or not stop():
            self.changed()  # note the version before the read: a commit after it wakes the next wait
            page = self.page(names, position, limit)
            position = page.cursor
            if page.events:
                yield page
            if not page.caught_up:
                continue
            while not self.changed():
                if stop is not None and stop():
                    return
                time.sleep(poll)


__all__ = ["DEFAULT_POLL_S", "Event", "EventPage", "EventReader", "MAX_LIMIT", "MIN_LIMIT", "PAGE_BYTES",
           "ROW_BYTES", "clamp_limit"]
