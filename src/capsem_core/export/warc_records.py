"""One batch of bodies as WARC records: each body's header block, or the reason it is skipped.

A batch's keys are read once as bytes (no string per value unless a body is skipped and
must be named), each body's record id checked, its source row found in bulk
(``warc_sources``) and its header block made (``warc_fields``), a part of the batch at a
time. The checks run in the order ``warc_summary`` gives; values many bodies share (a table,
a direction, a content type) are checked once.
"""

from __future__ import annotations

from collections.abc import Callable

from capsem_core.bodies import BodyBatch, TextColumn
from capsem_core.export import warc_fields as fields
from capsem_core.export import warc_sources as sources
from capsem_core.export.warc_summary import (
    CORRUPT_BODY,
    CORRUPT_KINDS,
    MISSING_SOURCE_ROW,
    UNREADABLE_BODY,
    UNREADABLE_TIMESTAMP,
    UNREPRESENTABLE_HEADER,
    UNREPRESENTABLE_URI,
    SkippedBody,
    Tally,
)

KEY_FIELDS = ("event_id", "source_table", "direction")
_UNSET = object()
MEMO_VALUE_BYTES = 256
# A skipped body's detail quotes the value at fault, cut to this many characters: a line on
# stderr per skipped body, never a megabyte of a hostile value.
SHOWN_CHARS = 200


def column_bytes(column: TextColumn) -> list[bytes | None]:
    """Each row's text as bytes (None for NULL), from the column's buffer in one pass."""
    plain = column.compact()
    raw = plain.data.tobytes()
    offsets = plain.offsets.tolist()
    return [None if null else raw[a:b] for a, b, null in zip(offsets, offsets[1:], plain.null.tolist())]


class Memo:
    """``check`` (``header_value`` by default) of values that repeat (tables, directions,
    content types), each checked once; a bounded memo, so a column of distinct values cannot
    grow it: at most ``limit`` values, each at most ``MEMO_VALUE_BYTES`` long (the values
    that repeat are short; a hostile column of long ones is checked each time instead)."""

    def __init__(self, limit: int = 4096, check: Callable[[bytes], bytes | None] = fields.header_value) -> None:
        self.seen: dict[bytes, bytes | None] = {}
        self.limit = limit
        self.check = check

    def __call__(self, raw: bytes | None) -> bytes | None:
        if raw is None:
            return None
        got = self.seen.get(raw, _UNSET)
        if got is _UNSET:
            got = self.check(raw)
            if len(self.seen) < self.limit and len(raw) <= MEMO_VALUE_BYTES:
                self.seen[raw] = got
        return got  # type: ignore[return-value]


class Memos:
    """The memos of one export, kept from batch to batch: header values (content types) and
    record id parts (tables, directions)."""

    def __init__(self) -> None:
        self.header = Memo()
        self.id_part = Memo(check=fields.id_part)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "surrogateescape")


def _shown(value: object) -> str:
    if value is None:
        return "NULL"
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    if isinstance(text, str) and len(text) > SHOWN_CHARS:
        return f"{text[:SHOWN_CHARS]!r}... ({len(text):,} characters)"
    return repr(text)


def _date(source: sources.Source, time: object, archived: bytes | None) -> bytes | None:
    if source.time is None:
        return None if archived is None else fields.warc_date_of_text(archived)
    if source.time == "timestamp_unix_ms":
        return fields.warc_date_of_ms(time)
    return fields.warc_date_of_text(time) if isinstance(time, bytes) else None


class BatchRecords:
    """The records of one BodyBatch (read with errors="report"): ``part(start, end)`` gives
    the header blocks of rows [start, end) that are written and their rows, and counts every
    other row of it in ``tally`` under its reason."""

    def __init__(self, batch: BodyBatch, session: bytes, query: sources.Query, tally: Tally,
                 memos: Memos | None = None) -> None:
        self.batch = batch
        self.session = session
        self.query = query
        self.tally = tally
        rows = batch.rows
        self.event_ids = column_bytes(rows.event_id)
        self.tables = column_bytes(rows.source_table)
        self.directions = column_bytes(rows.direction)
        self.content_types = column_bytes(rows.content_type)
        self.memos = memos if memos is not None else Memos()
        self.faults = {int(f.row_id): f for f in batch.findings if f.row_id is not None}
        # Each row's event_id as its header bytes (None: no record id can carry it), and the
        # first row of each event in its table, for the rows a record id can name.
        self.named: list[bytes | None] = [fields.id_part(e) if e is not None else None for e in self.event_ids]
        wanted: dict[str, set[str]] = {}
        for raw, table in zip(self.named, self.tables):
            name = None if table is None else _text(table)
            if raw is not None and name in sources.SOURCES:
                wanted.setdefault(name, set()).add(raw.decode("utf-8"))
        self.first = {table: sources.first_rows(query, table, ids) for table, ids in wanted.items()}

    def _skip(self, i: int, reason: str, detail: str, field: str | None = None) -> None:
        self.tally.skip(SkippedBody(_text(self.event_ids[i]), _text(self.tables[i]), _text(self.directions[i]),
                                    reason, field, detail))

    def part(self, start: int, end: int) -> tuple[list[bytes], list[int]]:
        """Header blocks of the records of rows [start, end) that are written, and their rows."""
        batch, rows, memo, id_memo = self.batch, self.batch.rows, self.memos.header, self.memos.id_part
        ids = rows.id[start:end].tolist()
        # The source rows of this part, one query per table; the archive times of its
        # tool_responses bodies.
        first_of: list[int | None] = []
        wanted: dict[str, list[int]] = {}
        responses: list[int] = []
        for k, i in enumerate(range(start, end)):
            table, raw = self.tables[i], self.named[i]
            name = None if table is None else table.decode("utf-8", "surrogateescape")
            row = None
            if raw is not None and name in self.first:
                row = self.first[name].get(raw.decode("utf-8"))
                if row is not None:
                    wanted.setdefault(name, []).append(row)
                    if name == "tool_responses":
                        responses.append(ids[k])
            first_of.append(row)
        found = {table: sources.source_rows(self.query, table, rids) for table, rids in wanted.items()}
        archived = sources.archive_times(self.query, responses)
        digests = rows.digest[start:end].tobytes().hex().encode()
        truncated = rows.truncated[start:end].tolist()
        lengths = batch.lengths[start:end].tolist()
        ok = batch.ok[start:end].tolist()
        heads: list[bytes] = []
        kept: list[int] = []
        for k, i in enumerate(range(start, end)):
            event_id, table, direction = self.named[i], id_memo(self.tables[i]), id_memo(self.directions[i])
            if event_id is None or table is None or direction is None:
                field = KEY_FIELDS[(event_id, table, direction).index(None)]
                value = (self.event_ids, self.tables, self.directions)[KEY_FIELDS.index(field)][i]
                self._skip(i, UNREPRESENTABLE_HEADER, f"its {field} {_shown(value)} cannot be part of a record id "
                           "(NULL, a control character, a line break, ':', '<', '>' or a space, not UTF-8, or "
                           "over 64 KiB)", field)
                continue
            name = table.decode("utf-8")
            source = sources.SOURCES.get(name)
            src = None if first_of[k] is None else found[name].get(first_of[k])  # type: ignore[arg-type]
            if source is None or src is None:
                self._skip(i, MISSING_SOURCE_ROW, "its source_table names no body table" if source is None else
                           f"no {name} row has its event_id, so the body has no target URI")
                continue
            uri = None if src.uri is None else fields.header_value(src.uri)
            if uri is None:
                self._skip(i, UNREPRESENTABLE_URI, "its target URI is NULL" if src.uri_bytes is None else
                           f"its target URI is {src.uri_bytes} bytes, over 64 KiB" if src.uri is None else
                           f"its target URI {_shown(src.uri)} has a control character or a line break a WARC "
                           "header cannot carry, or is not UTF-8")
                continue
            stamp = archived.get(ids[k]) if source.time is None else src.time
            date = _date(source, src.time, archived.get(ids[k]))
            if date is None:
                self._skip(i, UNREADABLE_TIMESTAMP, f"its time {_shown(stamp)} is not a ledger timestamp")
                continue
            if not ok[k]:
                fault = self.faults.get(ids[k])
                kind = fault.kind if fault is not None else "index"
                if kind == "nomem":
                    raise MemoryError(f"out of memory reading the body of event {_shown(self.event_ids[i])}")
                self._skip(i, CORRUPT_BODY if kind in CORRUPT_KINDS else UNREADABLE_BODY,
                           fault.message if fault is not None else "it did not read back")
                continue
            content_type = self.content_types[i]
            ctype = memo(content_type)
            if content_type is not None and ctype is None:
                self._skip(i, UNREPRESENTABLE_HEADER, f"its content_type {_shown(content_type)} has a control "
                           "character or a line break a WARC header cannot carry, is not UTF-8 or is over 64 KiB",
                           "content_type")
                continue
            rid = fields.record_id(self.session, table, event_id, direction)
            heads.append(fields.resource_head(rid, uri, date, digests[64 * k:64 * k + 64], truncated[k], ctype,
                                              lengths[k]))
            kept.append(i)
        return heads, kept


__all__ = ["BatchRecords", "KEY_FIELDS", "Memo", "Memos", "column_bytes"]
