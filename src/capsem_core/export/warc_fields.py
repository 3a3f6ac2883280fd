"""What a WARC record of a Capsem export says: its header block, a warcinfo's fields, record
ids and dates, and which values a header may carry.

The facts are Capsem's own export's (``capsem-warc-export.md``), so an export from
capsem-core and one from Capsem sit in one collection: WARC/1.1 ``resource`` records with
their fields in one fixed order, ``urn:capsem:`` record ids built from the body index's
unique key, dates in whole UTC seconds, a ``blake3:`` block digest, and ``warcinfo``
records of ``application/warc-fields`` opening and closing the file.

A header is a line-oriented block: a CR or LF in a value forges the rest of it, so a value
holding one is refused (the record is skipped and counted), never sanitised. So is one
holding any other control character (WARC's TEXT has none: a reader printing a header would
hand it to a terminal) or Unicode's other line breaks (NEL, U+2028, U+2029, where a reader
splitting lines the Unicode way would cut). A value must also be UTF-8 and at most
``MAX_HEADER_VALUE_BYTES`` long. A record id's parts are joined by ``:`` inside ``<>``, so a
part holding one of those, or a space, is refused too: two rows could otherwise name one id.
Nothing here reads a ledger.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from capsem_core._native import _blake3

WARCINFO_CONTENT_TYPE = "application/warc-fields"
DEFAULT_CONTENT_TYPE = b"application/octet-stream"
# Two CRLFs end a record; they are not part of its block.
RECORD_TRAILER = b"\r\n\r\n"
# A value longer than this is no header a reader should be asked to hold (Capsem bounds its
# source texts at the same 64 KiB).
MAX_HEADER_VALUE_BYTES = 64 << 10

# Years 1970..9999: the milliseconds a WARC date can name.
MAX_UNIX_MS = 253_402_300_799_999
_LEDGER_TIME = re.compile(rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z")
_BREAK = re.compile(rb"[\r\n]")
# C0 controls, DEL, C1 controls (U+0080-U+009F, NEL among them) and U+2028 / U+2029, as the
# bytes UTF-8 spells them.
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")
_ID_SEPARATOR = re.compile(rb"[:<> ]")


def header_value(raw: bytes) -> bytes | None:
    """``raw`` when a header may carry it (UTF-8, no control character or line break, at
    most MAX_HEADER_VALUE_BYTES), else None."""
    if len(raw) > MAX_HEADER_VALUE_BYTES or _CONTROL.search(raw):
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return raw


def warc_date_of_text(stamp: bytes) -> bytes | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` from a ledger timestamp that is exactly
    ``YYYY-MM-DDTHH:MM:SS[.fraction]Z`` and names a real UTC time, truncated to the second;
    None for anything else (another shape, an offset, a 31st of February): refused, never
    reinterpreted."""
    if _LEDGER_TIME.fullmatch(stamp) is None:
        return None
    second = stamp[:19]
    try:
        datetime.fromisoformat(second.decode("ascii"))  # a real date and time of day
    except ValueError:
        return None
    return second + b"Z"


def warc_date_of_ms(millis: object) -> bytes | None:
    """The WARC date of a ``timestamp_unix_ms`` value (an integer from 0 to the last
    millisecond of 9999), truncated to the second; None for anything else."""
    if type(millis) is not int or not 0 <= millis <= MAX_UNIX_MS:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(millis // 1000)).encode()


def warc_date_now() -> str:
    """Now, as a WARC date (whole UTC seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def id_part(raw: bytes) -> bytes | None:
    """``raw`` when a record id may hold it as one of its parts (a header value holding no
    ``:``, ``<``, ``>`` or space), else None."""
    if _ID_SEPARATOR.search(raw):
        return None
    return header_value(raw)


def record_id(session: bytes, source_table: bytes, event_id: bytes, direction: bytes) -> bytes:
    """A body's record id: ``urn:capsem:{session}:{source_table}:{event_id}:{direction}``,
    the body index's unique key under the session's name (unique across a collection)."""
    return b"urn:capsem:%s:%s:%s:%s" % (session, source_table, event_id, direction)


def warcinfo_id(session: str, which: str, export_id: str) -> str:
    """``urn:capsem:{session}:warcinfo:{opening|closing}:{export uuid}``: one uuid per export,
    so two exports merged into one collection never collide."""
    return f"urn:capsem:{session}:warcinfo:{which}:{export_id}"


def resource_head(rid: bytes, uri: bytes, date: bytes, digest_hex: bytes, truncated: bool,
                  content_type: bytes | None, length: int) -> bytes:
    """A body's header block, fields in Capsem's order, ending in the blank line."""
    return (b"WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: <%s>\r\nWARC-Target-URI: %s\r\n"
            b"WARC-Date: %s\r\nWARC-Block-Digest: blake3:%s\r\n%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (rid, uri, date, digest_hex, b"WARC-Truncated: length\r\n" if truncated else b"",
               DEFAULT_CONTENT_TYPE if content_type is None else content_type, length))


def warc_fields(fields: list[tuple[str, str]]) -> bytes:
    """An ``application/warc-fields`` block: ``name: value`` lines ending in CRLF. The values
    are this export's own (counts, the session's name, checked before the export starts)."""
    for name, value in fields:
        if _BREAK.search(f"{name}{value}".encode("utf-8", "surrogateescape")):
            raise ValueError(f"a warcinfo field holds a line break: {name!r}")
    return "".join(f"{name}: {value}\r\n" for name, value in fields).encode("utf-8")


def warcinfo_record(session: str, which: str, export_id: str, date: str, fields: list[tuple[str, str]]) -> bytes:
    """A ``warcinfo`` record's header block and fields (RECORD_TRAILER follows it, as every
    record's): no target URI, the block's BLAKE3 as its digest."""
    block = warc_fields(fields)
    head = (f"WARC/1.1\r\nWARC-Type: warcinfo\r\nWARC-Record-ID: <{warcinfo_id(session, which, export_id)}>\r\n"
            f"WARC-Date: {date}\r\nWARC-Block-Digest: blake3:{_blake3.hexdigest(block)}\r\n"
            f"Content-Type: {WARCINFO_CONTENT_TYPE}\r\nContent-Length: {len(block)}\r\n\r\n")
    return head.encode("utf-8") + block


__all__ = ["DEFAULT_CONTENT_TYPE", "MAX_HEADER_VALUE_BYTES", "MAX_UNIX_MS", "RECORD_TRAILER", "WARCINFO_CONTENT_TYPE",
           "header_value", "id_part", "record_id", "resource_head", "warc_date_now", "warc_date_of_ms",
           "warc_date_of_text", "warc_fields", "warcinfo_id", "warcinfo_record"]
