# cython: language_level=3
"""The ledger exception hierarchy and the status table, owned by native code.

Every error the native modules raise is built here, from the one table in common/status.c
(kind, exception name, message template per status), so native code never imports the
Python layer. The Python layer's errors module is the public home of these classes (and
names itself their module).
"""

import collections
import os
from pathlib import Path

from status cimport (CAPSEM_IN_BLOCK_TEMPLATE, capsem_report_code, capsem_status_count, capsem_status_info,
                     capsem_status_table)


class LedgerError(Exception):
    """Anything wrong with a ledger. ``path`` names the file the problem is in."""

    def __init__(self, message, path=None):
        self.path = None if path is None else Path(path)
        self.detail = message
        super().__init__(f"{self.path}: {message}" if self.path is not None else message)


class ArchiveError(LedgerError):
    """``session.bodies`` does not hold what its index says (Capsem's ArchiveError kinds)."""


class BadFileHeader(ArchiveError):
    """The file does not begin with a CAPSEMBL version-2 header."""


class BadBlockHeader(ArchiveError):
    """No BLK2 block header where the index says a block starts."""


class UnsupportedCodec(ArchiveError):
    """A block header names a codec this reader does not know (or sets reserved bits)."""


class BadSegment(ArchiveError):
    """A segment header out of bounds, not chained, or a payload without its sync flush."""


class IntegrityError(ArchiveError):
    """A segment's bytes, lengths or stream end disagree with its header."""


class InflateError(ArchiveError):
    """A segment's compressed payload is not a valid stream."""


class TruncatedBlock(ArchiveError):
    """The file ends inside a block the index vouches for."""


class RefOutOfRange(ArchiveError):
    """A body reference falls outside its block's raw bytes (or outside 16 MiB)."""


class BodyHashMismatch(ArchiveError):
    """The bytes a row names hash to something other than its ``body_hash``."""


class SymlinkRefused(LedgerError):
    """A ledger file is a symlink: refused, never followed."""


class SchemaMismatch(LedgerError):
    """``session.db`` was written by another build: no migrations, so it is refused."""


class WriterBusy(LedgerError):
    """The ledger already has a writer."""


class WriterPoisoned(LedgerError):
    """An earlier partial write leaves the writer unable to vouch for the file's end."""


class BodyTooLarge(LedgerError):
    """A body larger than one block can hold (16 MiB)."""


class BlockFull(LedgerError):
    """A body does not fit beside what the open block holds."""


class RowRejected(LedgerError):
    """session.db's constraints refused rows a writer was given; they were dropped, the rest kept."""


class CursorError(LedgerError):
    """An events cursor this ledger cannot resume from: not a cursor, edited, of another
    ledger, or ahead of what the ledger holds."""


EXCEPTIONS = (LedgerError, ArchiveError, BadFileHeader, BadBlockHeader, UnsupportedCodec, BadSegment,
              IntegrityError, InflateError, TruncatedBlock, RefOutOfRange, BodyHashMismatch, SymlinkRefused,
              SchemaMismatch, WriterBusy, WriterPoisoned, BodyTooLarge, BlockFull, RowRejected, CursorError)
_CLASSES = {cls.__name__: cls for cls in EXCEPTIONS}
_CLASSES["MemoryError"] = MemoryError


Status = collections.namedtuple("Status", "code name kind exception message message_detail at_segment")
Status.__doc__ = ("One row of the native status table: the code, its C name, the finding kind, the exception "
                  "name, the message template (str.format fields at, codec, detail, size, want, got, path), "
                  "the template used when there is a detail (None: the detail is not shown), and whether "
                  "`at` is a segment's file offset rather than a block's.")


cdef object _text(const char *s):
    return None if s == NULL else s.decode()


cdef tuple _read_table():
    cdef size_t i
    rows = []
    for i in range(capsem_status_count):
        r = &capsem_status_table[i]
        rows.append(Status(r.code, _text(r.name), _text(r.kind), _text(r.exception), _text(r.message),
                           _text(r.message_detail), bool(r.at_segment)))
    return tuple(rows)


STATUSES = _read_table()
_BY_CODE = {s.code: s for s in STATUSES}
IN_BLOCK_TEMPLATE = CAPSEM_IN_BLOCK_TEMPLATE.decode()
# Every code is a module attribute under its C name (CAPSEM_E_SEGMENT, CAPSEM_V_BODY_HASH, ...).
globals().update({s.name: s.code for s in STATUSES})


def status(int code):
    """The table row of a code (KeyError if the table has none)."""
    return _BY_CODE[code]


def report_code(int status, bint hash_mismatch=False):
    """The code a C error is worded by: its status, refined by what the reader saw."""
    return capsem_report_code(status, hash_mismatch)


def kind(int code):
    """The finding kind of a code."""
    return _BY_CODE[code].kind


def exception_class(int code):
    """The exception class a code raises."""
    return _CLASSES[_BY_CODE[code].exception]


def message(int code, *, at=0, codec=0, detail=None, size=0, want="", got="", path=None, block=None):
    """A code's text: its detail template when ``detail`` is given (not None) and the table has
    one. ``block``, for a code whose `at` is a segment offset, puts the offset of the block
    holding that segment in front (not when the two are the same offset)."""
    row = _BY_CODE[code]
    template = row.message_detail if detail is not None and row.message_detail is not None else row.message
    text = template.format(at=at, codec=codec, detail="" if detail is None else detail, size=size, want=want, got=got,
                           path=None if path is None else os.fspath(path))
    if block is not None and row.at_segment and block != at:
        text = IN_BLOCK_TEMPLATE.format(block=block, text=text)
    return text


def error(int code, path=None, **fields):
    """The exception a code raises, worded by the table, naming ``path``."""
    cls = exception_class(code)
    text = message(code, path=path, **fields)
    if issubclass(cls, LedgerError):
        return cls(text, path)
    return cls(text)
