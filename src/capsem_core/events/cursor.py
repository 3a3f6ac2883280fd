"""The events cursor: where a reader stands in each event table, as one opaque string.

A cursor holds, per event table, a *mark*: the position (the ``id`` of the last row
delivered, 0 before the first) and an *anchor*, a digest of the ``event_id`` and time of
the row at that position. Capsem's files carry no ledger id, so the anchors are the
ledger's identity: a cursor resumes only on a ledger whose rows at those positions are the
same rows (a copy of the ledger, or a fork up to where it was forked), and is refused on
any other. A cursor at the start of every table names no row and fits every ledger.

Text form: ``ev1.`` and the URL-safe base64 (no padding) of::

    version (1 byte, 1)
    per table with a position, in EVENT_TABLES order:
        table number | 0x80 when an anchor follows (1 byte)
        position (unsigned LEB128, at most 9 bytes: a SQLite rowid is below 2**63)
        anchor (8 bytes, when flagged)
    check (16 bytes): keyed BLAKE2b of everything before it

The check makes any edit or damage detectable; it is not a secret (the key is in this
file): a cursor written by hand must still match the ledger's rows and may not stand past
its last row, so it can only name positions the reader could have reached anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from capsem_core.errors import CursorError
from capsem_core.events.tables import EVENT_TABLE_NAMES, TABLE_NUMBER

PREFIX = "ev1."
VERSION = 1
# Every table marked: 1 + 13 * (1 + 9 + 8) + 16 bytes, about 330 characters; refuse far
# longer text before decoding it.
MAX_CURSOR_CHARS = 1024
ANCHOR_BYTES = 8
_CHECK_BYTES = 16
_CHECK_KEY = b"capsem-core events cursor v1"
_ANCHORED = 0x80
_MAX_POSITION = (1 << 63) - 1

Where = os.PathLike[str] | str | None


@dataclass(frozen=True, slots=True)
class Mark:
    """Where a reader stands in one table: the last ``position`` delivered (0: none yet)
    and the ``anchor`` of the row there (None when the position names no row)."""

    position: int
    anchor: bytes | None = None


START: Mapping[str, Mark] = {}


def anchor_of(event_id: object, when: object) -> bytes:
    """The anchor of a row: a digest of its ``event_id`` and its stored time."""
    h = hashlib.blake2b(digest_size=ANCHOR_BYTES, person=b"capsem-anchor")
    for value in (event_id, when):
        if isinstance(value, bytes):
            data = b"b" + value
        elif isinstance(value, str):
            data = b"s" + value.encode("utf-8", "surrogateescape")
        else:
            data = b"v" + repr(value).encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.digest()


def leb128(value: int) -> bytes:
    """A non-negative integer as unsigned LEB128 (seven bits a byte, the low ones first)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def read_leb128(payload: bytes, i: int, most: int, refuse: Callable[[], CursorError]) -> tuple[int, int]:
    """The unsigned LEB128 integer at ``payload[i:]`` (at most ``most`` bytes) and where it
    ends; ``refuse()`` is raised for one cut short or longer."""
    value = shift = 0
    for k in range(most + 1):
        if k == most or i >= len(payload):
            raise refuse()
        byte = payload[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i
    raise refuse()


def _check(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECK_BYTES, key=_CHECK_KEY).digest()


def encode(marks: Mapping[str, Mark]) -> str:
    """The text of a cursor standing at ``marks`` (tables left out stand at their start)."""
    out = bytearray((VERSION,))
    for name in EVENT_TABLE_NAMES:
        mark = marks.get(name)
        if mark is None or mark.position == 0:
            continue
        if not 0 < mark.position <= _MAX_POSITION:
            raise ValueError(f"position {mark.position} of {name} is not a rowid")
        anchored = mark.anchor is not None
        out.append(TABLE_NUMBER[name] | (_ANCHORED if anchored else 0))
        out += leb128(mark.position)
        if mark.anchor is not None:
            if len(mark.anchor) != ANCHOR_BYTES:
                raise ValueError("an anchor is 8 bytes")
            out += mark.anchor
    out += _check(bytes(out))
    return PREFIX + base64.urlsafe_b64encode(bytes(out)).rstrip(b"=").decode("ascii")


def _refuse(why: str, where: Where) -> CursorError:
    return CursorError(f"not a usable events cursor: {why}", where)


def checked_payload(body: str, key: bytes, minimum: int, refuse: Callable[[str], CursorError]) -> bytes:
    """The payload of a cursor's text (after its prefix): URL-safe base64 exactly as written,
    at least ``minimum`` bytes before a 16-byte check (keyed BLAKE2b with ``key``) that
    matches. ``refuse(why)`` is raised otherwise (scan cursors share this form)."""
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise refuse("its text is not URL-safe base64") from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != body:
        # Spare bits of the last character set: the same bytes, but not the text we wrote.
        raise refuse("its text is not the one capsem-core wrote (edited)")
    if len(raw) < minimum + _CHECK_BYTES:
        raise refuse("it is cut short")
    payload, check = raw[:-_CHECK_BYTES], raw[-_CHECK_BYTES:]
    if not hmac.compare_digest(check, hashlib.blake2b(payload, digest_size=_CHECK_BYTES, key=key).digest()):
        raise refuse("it fails its integrity check (edited or damaged)")
    return payload


def check_after(after: object) -> str:
    """``after`` as every reader takes it: "start", "latest" or a cursor's text; TypeError
    for anything that is not a str (a list, bytes), before any of it is read."""
    if not isinstance(after, str):
        raise TypeError(f"after must be 'start', 'latest' or a cursor's text, not {type(after).__name__}")
    return after


def decode(text: str, where: Where = None) -> dict[str, Mark]:
    """The marks a cursor's text holds. Raises CursorError (naming ``where``, the ledger's
    session.db) for text that is not a cursor, is of another version, or was edited."""
    if len(text) > MAX_CURSOR_CHARS:
        raise _refuse(f"{len(text)} characters, more than any cursor has", where)
    if not text.startswith(PREFIX):
        other = text.split(".", 1)[0] if text.startswith("ev") and "." in text[:8] else None
        why = (f"it is of cursor version {other[2:]!r}, which this capsem-core does not read" if other
               else "a cursor starts with 'ev1.' (or use 'start' or 'latest')")
        raise _refuse(why, where)
    payload = checked_payload(text[len(PREFIX):], _CHECK_KEY, 1, lambda why: _refuse(why, where))
    if payload[0] != VERSION:
        raise _refuse(f"it is of cursor version {payload[0]}, which this capsem-core does not read", where)
    marks: dict[str, Mark] = {}
    i, last_number = 1, -1
    while i < len(payload):
        flags = payload[i]
        number = flags & ~_ANCHORED
        if number >= len(EVENT_TABLE_NAMES) or number <= last_number:
            raise _refuse("its tables are out of order or unknown", where)
        last_number = number
        i += 1
        position, i = read_leb128(payload, i, 9, lambda: _refuse("a position is cut short or too long", where))
        if not 0 < position <= _MAX_POSITION:
            raise _refuse("a position is not a rowid", where)
        anchor = None
        if flags & _ANCHORED:
            if i + ANCHOR_BYTES > len(payload):
                raise _refuse("an anchor is cut short", where)
            anchor = payload[i:i + ANCHOR_BYTES]
            i += ANCHOR_BYTES
        marks[EVENT_TABLE_NAMES[number]] = Mark(position, anchor)
    return marks


__all__ = ["ANCHOR_BYTES", "MAX_CURSOR_CHARS", "Mark", "PREFIX", "START", "VERSION", "anchor_of", "check_after",
           "checked_payload", "decode", "encode", "leb128", "read_leb128"]
