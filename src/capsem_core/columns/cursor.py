"""Cursors of column scans, and the checks every cursor meets in a snapshot.

A scan of an event table ends at an events cursor (``ev1.``, ``capsem_core.events.cursor``):
the cursor it was started after (or none), with that table's mark moved to the scan's last
row. It is valid as ``after`` for ``Ledger.events`` and for another scan. A scan of any other
table ends at a scan cursor: ``sc1.`` and the URL-safe base64 (no padding) of::

    version (1 byte, 1)
    table number (1 byte: its place in capsem_core.schema.TABLES)
    flags (1 byte): 0x40 a position follows, 0x20 it is negative, 0x80 an anchor follows
    position (unsigned LEB128 of its magnitude, at most 10 bytes)
    anchor (8 bytes, when flagged)
    check (16 bytes): keyed BLAKE2b of everything before it

The position is the rowid of the last row delivered; the anchor a digest of the row there
(``ANCHOR_COLUMNS``: values no writer rewrites), so a cursor resumes only where the row at its
position is the same row, as an events cursor does. ``body_blocks`` rows are rewritten as
their block grows, so its cursors carry no anchor and are refused only past the last row.

Both kinds are checked in the snapshot of the scan that takes them (``check_marks``,
``check_scan``): a position past the table's last row (the larger of its last rowid and,
for AUTOINCREMENT tables, the last id handed out) is another ledger's, or a later copy's; an
anchor that is not the row's is another ledger's; no row at all where the cursor stands is
said as that (deleted since, or another ledger's).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from capsem_core import schema
from capsem_core._native import _columns
from capsem_core.columns.plan import quote
from capsem_core.errors import CursorError
from capsem_core.events import cursor as events_cursor
from capsem_core.events.cursor import Mark, Where
from capsem_core.events.tables import EVENT_TABLES

PREFIX = "sc1."
VERSION = 1
MAX_CURSOR_CHARS = 128
_CHECK_BYTES = 16
_CHECK_KEY = b"capsem-core scan cursor v1"
_HAS_POSITION, _NEGATIVE, _ANCHORED = 0x40, 0x20, 0x80

# The values a row's anchor digests, per table: what identifies the row and never changes.
ANCHOR_COLUMNS: dict[str, tuple[str, ...]] = {
    **{t.name: ("event_id", t.time_column) for t in EVENT_TABLES},
    "event_body_blobs": ("event_id", "body_hash"),
    "tool_responses": ("event_id", "call_id"),
    "profile_mutation_events": ("mutation_id", "timestamp_unix_ms"),
    "transport_schema": ("version",),
    "body_blocks": (),
}
_EVENT_TABLE_NAMES = frozenset(t.name for t in EVENT_TABLES)


@dataclass(frozen=True, slots=True)
class ScanPosition:
    """Where a scan cursor stands: its table, the rowid after which the next scan starts
    (None: the start) and the anchor of the row there."""

    table: str
    position: int | None
    anchor: bytes | None = None


def _check(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECK_BYTES, key=_CHECK_KEY).digest()


def encode(at: ScanPosition) -> str:
    """The text of a scan cursor."""
    out = bytearray((VERSION, schema.TABLES.index(at.table)))
    flags = 0
    if at.position is not None:
        flags |= _HAS_POSITION | (_NEGATIVE if at.position < 0 else 0)
    if at.anchor is not None:
        flags |= _ANCHORED
    out.append(flags)
    if at.position is not None:
        out += events_cursor.leb128(abs(at.position))
    if at.anchor is not None:
        out += at.anchor
    out += _check(bytes(out))
    return PREFIX + base64.urlsafe_b64encode(bytes(out)).rstrip(b"=").decode("ascii")


def _refuse(why: str, where: Where) -> CursorError:
    return CursorError(f"not a usable scan cursor: {why}", where)


def decode(text: str, where: Where = None) -> ScanPosition:
    """The position a scan cursor's text holds. CursorError (naming ``where``) for text that
    is not one, of another version, or edited."""
    if len(text) > MAX_CURSOR_CHARS:
        raise _refuse(f"{len(text)} characters, more than any scan cursor has", where)
    if not text.startswith(PREFIX):
        raise _refuse("a scan cursor starts with 'sc1.' (an events cursor with 'ev1.'; or use 'start' or "
                      "'latest')", where)
    payload = events_cursor.checked_payload(text[len(PREFIX):], _CHECK_KEY, 3, lambda why: _refuse(why, where))
    if payload[0] != VERSION:
        raise _refuse(f"it is of scan cursor version {payload[0]}, which this capsem-core does not read", where)
    if payload[1] >= len(schema.TABLES):
        raise _refuse("its table is unknown", where)
    flags, i = payload[2], 3
    position = None
    if flags & _HAS_POSITION:
        magnitude, i = events_cursor.read_leb128(payload, i, 10,
                                                 lambda: _refuse("its position is cut short or too long", where))
        position = -magnitude if flags & _NEGATIVE else magnitude
        if not -(1 << 63) <= position < (1 << 63):
            raise _refuse("its position is not a rowid", where)
    anchor = None
    if flags & _ANCHORED:
        anchor = payload[i:i + events_cursor.ANCHOR_BYTES]
        i += events_cursor.ANCHOR_BYTES
        if len(anchor) != events_cursor.ANCHOR_BYTES:
            raise _refuse("its anchor is cut short", where)
    if i != len(payload) or flags & ~(_HAS_POSITION | _NEGATIVE | _ANCHORED):
        raise _refuse("it holds more than a scan cursor does", where)
    return ScanPosition(schema.TABLES[payload[1]], position, anchor)


# -- what a snapshot says ---------------------------------------------------------------------

def rowid_of(table: str) -> str:
    """The column that is ``table``'s rowid in the schema (its INTEGER PRIMARY KEY)."""
    return "block_offset" if table == "body_blocks" else "id"


def latest(source: _columns.Source, tables: Iterable[str]) -> dict[str, int | None]:
    """Per table, the last position a reader can stand at: the larger of its largest rowid and
    (AUTOINCREMENT tables) the last id handed out, so rows deleted at the end are not waited
    for; None for a table that never held a row."""
    names = list(tables)
    has_sequence = bool(source.fetch("SELECT 1 FROM sqlite_schema WHERE name = 'sqlite_sequence'"))
    parts = []
    for name in names:
        parts.append(f"(SELECT MAX({quote(rowid_of(name))}) FROM {quote(name)})")
        parts.append(f"(SELECT seq FROM sqlite_sequence WHERE name = '{name}')" if has_sequence else "NULL")
    row = source.fetch("SELECT " + ", ".join(parts))[0] if names else ()
    out: dict[str, int | None] = {}
    for i, name in enumerate(names):
        values = [v for v in row[2 * i:2 * i + 2] if type(v) is int]
        out[name] = max(values) if values else None
    return out


def anchor_at(source: _columns.Source, table: str, position: int | None) -> bytes | None:
    """The anchor of the row of ``table`` at ``position`` (None: no row there, no position, or
    a table whose rows carry no anchor)."""
    columns = ANCHOR_COLUMNS[table]
    if position is None or not columns:
        return None
    found = source.fetch(f"SELECT {', '.join(map(quote, columns))} FROM {quote(table)} "
                         f"WHERE {quote(rowid_of(table))} = ?",
                         (position,))
    if not found:
        return None
    values = tuple(found[0]) + (None,) * (2 - len(columns))
    return events_cursor.anchor_of(values[0], values[1])


def _stands_past(where: Where, table: str, position: int, last: int | None) -> CursorError:
    return CursorError(f"the cursor stands at row {position} of {table}, but the ledger's last row there is "
                       f"{last or 0}: it is a cursor of another ledger (or of a later copy of this one)", where)


def _not_the_row(where: Where, table: str, position: int, gone: bool) -> CursorError:
    if gone:   # a ledger only grows: its row deleted since, or another ledger with a gap there
        return CursorError(f"the cursor stands on row {position} of {table}, which this ledger does not hold: the "
                           "row was deleted since the cursor was taken, or the cursor is another ledger's", where)
    return CursorError(f"the cursor is of another ledger: row {position} of {table} is not the row it was taken at",
                       where)


def check_marks(source: _columns.Source, marks: Mapping[str, Mark], where: Where,
                last: Mapping[str, int | None] | None = None) -> None:
    """CursorError unless every mark of an events cursor stands within its table and on the
    row it was taken at, in ``source``'s snapshot (``last``: the tables' latest positions,
    when the caller has them)."""
    if last is None:
        last = latest(source, marks)
    for name, mark in marks.items():
        if mark.position > (last[name] or 0):
            raise _stands_past(where, name, mark.position, last[name])
        anchor = anchor_at(source, name, mark.position)
        if anchor != mark.anchor:
            raise _not_the_row(where, name, mark.position, anchor is None)


def check_scan(source: _columns.Source, at: ScanPosition, where: Where) -> None:
    """CursorError unless a scan cursor stands within its table and on its row."""
    if at.position is None:
        return
    last = latest(source, [at.table])[at.table]
    if last is None or at.position > last:
        raise _stands_past(where, at.table, at.position, last)
    if ANCHOR_COLUMNS[at.table]:
        anchor = anchor_at(source, at.table, at.position)
        if anchor != at.anchor:
            raise _not_the_row(where, at.table, at.position, anchor is None)


def is_event_table(table: str) -> bool:
    return table in _EVENT_TABLE_NAMES


__all__ = ["ANCHOR_COLUMNS", "MAX_CURSOR_CHARS", "PREFIX", "ScanPosition", "VERSION", "anchor_at", "check_marks",
           "check_scan", "decode", "encode", "is_event_table", "latest", "rowid_of"]
