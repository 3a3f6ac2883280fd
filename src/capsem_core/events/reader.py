"""Pages of events with durable cursors, read in one snapshot of ``session.db``, and following.

``EventReader`` owns one read-only connection of its own (a ``_columns.Source``: the URI
``db.py`` chooses), so its read transactions are its alone. A page is read inside one
transaction: the latest position of every event table, the cursor's check against the rows it
stands on, each chosen table's rows after its position in id order (merged across tables by
time), and the names of their archived bodies. SQLite has one writer at a time and
AUTOINCREMENT never hands out an id twice, so a row committed after a snapshot always has a
higher id than every row of that table the snapshot shows: a per-table position is therefore
enough for every committed row to be delivered exactly once, however the writer's commits
fall between pages.

The rows are read the columnar way, natively (``_columns.Source.rows``): from the mapped
pages where the file is the transaction's snapshot (``columns.source.HeldFile``), else by
stepping SQLite's statement in C; no tuple per row, each table's times turned into merge keys
in one native pass (the writer's ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` parsed there, any other text
by ``text_time_us``), the tables merged by their heads natively, and only the rows a page
delivers made into dicts and ``Event`` values. A page costs about what a plain ``sqlite3``
loop over the same rows costs (docs/performance.md, "Events").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capsem_core import schema
from capsem_core._native import _columns
from capsem_core.columns import cursor as scan_cursor
from capsem_core.columns.plan import TablePlan, plan_table, quote
from capsem_core.columns.source import HeldFile, open_source
from capsem_core.errors import LedgerError
from capsem_core.events import cursor as _cursor
from capsem_core.events.cursor import Mark
from capsem_core.events.limits import DEFAULT_POLL_S, MAX_LIMIT, MIN_LIMIT, PAGE_BYTES, ROW_BYTES, clamp_limit
from capsem_core.events.tables import EVENT_TABLES, TABLE_NUMBER, EventTable, choose_tables, shown_time, text_time_us
from capsem_core.writer.rows import Stamper


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


_EVENT_SLOTS = tuple(Event.__dict__[name] for name in ("table", "id", "event_id", "timestamp", "row", "bodies"))


def _direction_key(direction: str) -> tuple[int, str]:
    return _DIRECTION_ORDER.get(direction, len(_DIRECTION_ORDER)), direction


# Rows read from each table at first: most pages take few rows of most tables; a table the
# merge runs short of is read again with four times as many (up to the page's size).
FIRST_READ = 64
# A read of a table also stops once its values hold its byte budget (Source.rows reads at
# least one row): at first its share of PAGE_BYTES, then four times the bytes it read when the
# merge took them all and wants more (all taken means fewer than PAGE_BYTES, so the new read
# reaches further). Each budget is at most four times what the page delivers of its table, so a
# page holds a few times PAGE_BYTES and a row per table at most, whatever the ledger holds.
READ_GROWTH = 4


@dataclass(slots=True)
class _Taken:
    """One table's rows of a page: the rows read after its position (``limit`` rows and
    ``budget`` bytes asked for), their merge keys and sizes, and how many the merge took (a
    prefix: a table's rows are delivered in id order). ``blocked`` is the id of a row the read
    stopped before, holding a value past ROW_BYTES (0 for none): it stands last in ``ids``,
    ``keys`` and ``sizes``, sized to end the merge where it is taken."""

    table: EventTable
    plan: TablePlan
    after: int
    limit: int
    budget: int
    rows: _columns.Rows
    ids: np.ndarray
    keys: np.ndarray
    sizes: np.ndarray
    blocked: int = 0
    count: int = 0

    @property
    def more(self) -> bool:
        return not self.blocked and (len(self.rows) == self.limit or self.rows.nbytes >= self.budget)

    def again(self, size: int) -> tuple[int, int]:
        """The limit and budget of the next read of a table the merge took all of."""
        limit = min(size, READ_GROWTH * self.limit) if len(self.rows) == self.limit else self.limit
        full = self.rows.nbytes >= self.budget
        return limit, min(PAGE_BYTES, READ_GROWTH * self.rows.nbytes) if full else self.budget


class EventReader:
    """Reads pages of events from one ledger's session.db (see the module docstring).

    ``Ledger.events`` and ``Ledger.follow`` are the public way in; a reader is opened by
    the Ledger on first use and closed with it. Thread-safe: pages are read one at a time.
    """

    def __init__(self, db_path: os.PathLike[str] | str):
        self.db_path = os.fspath(db_path)
        self._source, self._plan = open_source(self.db_path)
        # What the path names once opened (a follower watches that it stays so).
        st = os.stat(self.db_path)
        self._identity = (st.st_dev, st.st_ino)
        self._held = HeldFile(self.db_path)
        self._lock = threading.Lock()
        self._closed = False
        self._data_version: object = -1
        self._shapes: dict[str, TablePlan] = {}
        self._schema_version: object = None
        self._utf8 = True
        self._stamp = Stamper()
        self._latest_sql = "SELECT " + ", ".join(
            f"(SELECT MAX(id) FROM {t.name}), (SELECT seq FROM sqlite_sequence WHERE name = '{t.name}')"
            for t in EVENT_TABLES)

    def close(self) -> None:
        """Release the connection and the map (idempotent)."""
        with self._lock:
            self._closed = True
            self._source.close()
            self._held.close()

    def _live(self) -> None:
        if self._closed:
            raise LedgerError("ledger is closed: open it again to read its events", self.db_path)

    # -- one page ------------------------------------------------------------------------

    def page(self, tables: Iterable[str] | str | None = None, after: After = "start", limit: int = 100) -> EventPage:
        """The next page of events after ``after`` (see ``Ledger.events``)."""
        chosen = choose_tables(tables)
        size = clamp_limit(limit)
        _cursor.check_after(after)
        marks = None if after == "latest" else dict(_cursor.START) if after == "start" else _cursor.decode(
            after, self.db_path)
        with self._lock:
            self._live()
            self._source.begin()
            try:
                return self._read(chosen, marks, size)
            finally:
                self._source.end()

    def _shape(self, t: EventTable) -> TablePlan:
        """The table's plan (columns, record places, root), kept while the schema is the same."""
        version = self._source.fetch("PRAGMA schema_version")[0][0]
        if version != self._schema_version:
            self._shapes.clear()
            self._schema_version = version
            self._utf8 = self._source.fetch("PRAGMA encoding")[0][0] == "UTF-8"
        shape = self._shapes.get(t.name)
        if shape is None:
            shape = self._shapes[t.name] = plan_table(self._source, t.name, None, self._utf8)
        return shape

    def _read(self, chosen: tuple[EventTable, ...], marks: dict[str, Mark] | None, size: int) -> EventPage:
        latest = self._latest_positions()
        if marks is None:  # "latest": every table stands at its last committed row
            marks = {t.name: Mark(latest[t.name], scan_cursor.anchor_at(self._source, t.name, latest[t.name]))
                     for t in EVENT_TABLES if latest[t.name]}
            return EventPage([], _cursor.encode(marks), True)
        scan_cursor.check_marks(self._source, marks, self.db_path, latest)
        file = self._held.for_snapshot(self._source, self._plan)
        self._source.use_map(file)
        mapped = file is not None
        taken: list[_Taken] = []
        share = max(PAGE_BYTES // len(chosen), 1)
        for t in chosen:
            after_id = marks[t.name].position if t.name in marks else 0
            if after_id < latest[t.name]:
                x = self._read_table(t, after_id, min(size, FIRST_READ), share, mapped)
                if len(x.ids):
                    taken.append(x)
        while True:
            which, positions, short = _columns.merge_heads(
                [x.keys for x in taken], [x.ids for x in taken], [x.sizes for x in taken],
                [TABLE_NUMBER[x.table.name] for x in taken], size, PAGE_BYTES, [x.more for x in taken])
            if short < 0:
                break
            x = taken[short]
            taken[short] = self._read_table(x.table, x.after, *x.again(size), mapped)
        if len(which) and positions[-1] == len(taken[which[-1]].rows):
            # The merge reached a row it cannot deliver: the page ends before it, and the
            # page that would start with it fails, naming it.
            x = taken[which[-1]]
            which, positions = which[:-1], positions[:-1]
            if not len(which):
                raise LedgerError(f"row {x.blocked} of {x.table.name} holds a value larger than the "
                                  f"{ROW_BYTES >> 20} MiB an events page takes", self.db_path)
        for k, x in enumerate(taken):
            x.count = int(np.count_nonzero(which == k))
        return self._finish(chosen, marks, latest, taken, which.tolist(), positions.tolist())

    def _read_table(self, t: EventTable, after_id: int, limit: int, budget: int, mapped: bool) -> _Taken:
        shape = self._shape(t)
        rows = self._rows(shape, after_id, limit, mapped, budget)
        ids, keys, sizes = rows.rowid, self._time_keys(t, shape, rows), rows.sizes()
        if not rows.too_large:
            return _Taken(t, shape, after_id, limit, budget, rows, ids, keys, sizes)
        blocked, key = self._blocked(t, int(ids[-1]) if len(ids) else after_id, int(keys[-1]) if len(keys) else 0)
        return _Taken(t, shape, after_id, limit, budget, rows, np.append(ids, blocked), np.append(keys, key),
                      np.append(sizes, PAGE_BYTES), blocked)

    def _blocked(self, t: EventTable, last: int, last_key: int) -> tuple[int, int]:
        """The id and merge key of the row after ``last``, one a read stopped before: its
        time read alone (so the other tables' events before it are delivered), else the key
        of the row before it, as for any time that cannot be read."""
        found = self._source.fetch(f"SELECT id FROM {t.name} WHERE id > ? ORDER BY id LIMIT 1", (last,))
        if not found or type(found[0][0]) is not int:
            raise LedgerError(f"the rows of {t.name} after row {last} cannot be read", self.db_path)
        blocked = found[0][0]
        when = self._source.rows(1, max_value=ROW_BYTES, sql=f"SELECT {quote(t.time_column)}, id FROM {t.name} "
                                 "WHERE id = ?", params=(blocked,), utf8_db=self._utf8, ncols=1)
        assert when is not None
        if len(when) and not when.too_large:
            keys, read = self._read_times(t, 0, when)
            if read[0]:
                return blocked, int(keys[0])
        return blocked, last_key

    def _rows(self, shape: TablePlan, after_id: int, size: int, mapped: bool, budget: int = 0) -> _columns.Rows:
        """Up to ``size`` rows after ``after_id``, fewer once their values hold ``budget`` bytes
        (0: no bound but the rows')."""
        columns = shape.columns
        rows = None
        if mapped and shape.pages and shape.root is not None:
            rows = self._source.rows(size, max_value=ROW_BYTES, max_bytes=budget, records=[c.record for c in columns],
                                     reals=[c.real for c in columns], root=shape.root, after=after_id)
        if rows is None:  # no map, or pages not as SQLite writes them: SQLite's statement
            rows = self._source.rows(size, max_value=ROW_BYTES, max_bytes=budget,
                                     sql=shape.select_sql(True, limit=True), params=(after_id, size),
                                     utf8_db=self._utf8, ncols=len(columns))
        assert rows is not None
        return rows

    @staticmethod
    def _read_times(t: EventTable, at: int, rows: _columns.Rows) -> tuple[np.ndarray, np.ndarray]:
        """Each row's time (column ``at``) in microseconds, and whether it could be read."""
        keys, read = rows.time_keys(at, t.time_is_ms)
        if not t.time_is_ms:
            for i in np.flatnonzero(~read).tolist():
                us = text_time_us(rows.value_at(i, at))
                if us is not None:
                    keys[i] = min(max(us, -(1 << 63)), (1 << 63) - 1)
                    read[i] = True
        return keys, read

    @classmethod
    def _time_keys(cls, t: EventTable, shape: TablePlan, rows: _columns.Rows) -> np.ndarray:
        """Each row's merge key: its time in microseconds; a row whose time cannot be read
        keeps the key of the row before it in its table (0 before the first)."""
        keys, read = cls._read_times(t, [c.name for c in shape.columns].index(t.time_column), rows)
        if not read.all():
            index = np.where(read, np.arange(len(keys)), -1)
            np.maximum.accumulate(index, out=index)
            keys = np.where(index >= 0, keys[np.maximum(index, 0)], 0)
        return keys

    def _latest_positions(self) -> dict[str, int]:
        # Both MAX(id) and sqlite_sequence: the larger is the last id handed out (a row deleted
        # at the end leaves only the sequence; a hostile file may lack the sequence row).
        row = self._source.fetch(self._latest_sql)[0]
        out = {}
        for i, t in enumerate(EVENT_TABLES):
            values = [v for v in row[2 * i:2 * i + 2] if type(v) is int]
            out[t.name] = max(values, default=0)
        return out

    def _bodies(self, chosen: tuple[EventTable, ...], marks: Mapping[str, Mark],
                last: Mapping[str, int]) -> dict[tuple[str, object], tuple[str, ...]]:
        found: dict[tuple[str, object], list[str]] = {}
        for t in chosen:
            if t.has_bodies and t.name in last:
                first = marks[t.name].position if t.name in marks else 0
                for event_id, direction in self._source.fetch(
                        "SELECT event_id, direction FROM event_body_blobs WHERE source_table = ? AND event_id IN "
                        f"(SELECT event_id FROM {t.name} WHERE id > ? AND id <= ?)", (t.name, first, last[t.name])):
                    found.setdefault((t.name, event_id), []).append(str(direction))
        return {k: tuple(v) if len(v) < 2 else tuple(sorted(v, key=_direction_key)) for k, v in found.items()}

    def _finish(self, chosen: tuple[EventTable, ...], marks: dict[str, Mark], latest: Mapping[str, int],
                taken: list[_Taken], which: list[int], positions: list[int]) -> EventPage:
        last = {x.table.name: int(x.ids[x.count - 1]) for x in taken if x.count}
        bodies = self._bodies(chosen, marks, last)
        new_marks = dict(marks)
        caught_up = True
        by_name = {x.table.name: x for x in taken}
        for t in chosen:
            mark = marks.get(t.name, Mark(0))
            x = by_name.get(t.name)
            if x is not None and x.count:
                names = [c.name for c in x.plan.columns]
                values = x.rows.values(x.count - 1)
                mark = Mark(int(x.ids[x.count - 1]), _cursor.anchor_of(values[names.index("event_id")],
                                                                        values[names.index(t.time_column)]))
            if mark.position < latest[t.name]:
                # Nothing left up to the latest id (rows deleted at the end): stand there.
                left = self._source.fetch(f"SELECT 1 FROM {t.name} WHERE id > ? AND id <= ? LIMIT 1",
                                          (mark.position, latest[t.name]))
                if not left:
                    mark = Mark(latest[t.name], scan_cursor.anchor_at(self._source, t.name, latest[t.name]))
                else:
                    caught_up = False
            new_marks[t.name] = mark
        rows = [x.rows.dicts([c.name for c in x.plan.columns], range(x.count)) for x in taken]
        # Built natively: the Event values of the page, no __init__ per event (the fields set
        # through their slots, the millisecond times rendered as the writer stamps them).
        events = _columns.build_events(
            Event, _EVENT_SLOTS, [x.table.name for x in taken], [x.table.time_is_ms for x in taken],
            [x.table.time_column for x in taken], rows, [x.ids[:x.count].tolist() for x in taken], which, positions,
            bodies, lambda k, value: shown_time(taken[k].table, value, self._stamp))
        return EventPage(events, _cursor.encode(new_marks), caught_up, marks)

    # -- following -----------------------------------------------------------------------

    def changed(self) -> bool:
        """True when another connection committed since the last call (``PRAGMA data_version``,
        a read of the connection's own state: cheap enough to poll many times a second)."""
        with self._lock:
            self._live()
            version = self._source.fetch("PRAGMA data_version")[0][0]
            seen, self._data_version = self._data_version, version
            return bool(version != seen)

    def follow(self, tables: Iterable[str] | str | None = None, after: After = "start", limit: int = MAX_LIMIT,
               poll: float = DEFAULT_POLL_S, stop: Callable[[], bool] | None = None) -> Iterator[EventPage]:
        """Pages as rows are committed, forever, or until ``stop()`` is true (see ``Ledger.follow``).

        The tables, ``after`` and ``limit`` are checked now, not at the first page."""
        names = [t.name for t in choose_tables(tables)]
        clamp_limit(limit)
        if _cursor.check_after(after) not in ("start", "latest"):
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
                self._still_there()
                time.sleep(poll)

    def _still_there(self) -> None:
        """LedgerError once the path no longer names the session.db this reader opened (the
        ledger removed, or another file put in its place): no event could ever come."""
        try:
            st = os.stat(self.db_path)
            same = (st.st_dev, st.st_ino) == self._identity
        except OSError:
            same = False
        if not same:
            raise LedgerError("session.db was removed or replaced while it was followed: no new event can come "
                              "(the cursor printed resumes where this stopped)", self.db_path)


__all__ = ["DEFAULT_POLL_S", "Event", "EventPage", "EventReader", "MAX_LIMIT", "MIN_LIMIT", "PAGE_BYTES",
           "ROW_BYTES", "clamp_limit"]
