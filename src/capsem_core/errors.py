"""Every exception capsem-core raises: the one public home of the hierarchy.

The classes are defined by the native core (``capsem_core._native._errors``), so that C and
Cython code raise them without importing the Python layer; this module re-exports them and
names itself their module, so tracebacks and pickles say ``capsem_core.errors``.

``LedgerError(message, path=None)`` is the base: ``.path`` (a Path, or None) names the file
the problem is in, ``.detail`` is the message without it, and ``str()`` is
``"<path>: <message>"``.

``WriterLockLost`` is the one exception defined here: only the Python writer raises it.
``LedgerWarning`` is the category of what the library warns about through ``warnings``
(the library never prints; the command line shows each warning as one escaped line).
"""

from __future__ import annotations

from capsem_core._native import _errors
from capsem_core._native._errors import (
    ArchiveError,
    BadBlockHeader,
    BadFileHeader,
    BadSegment,
    BlockFull,
    BodyHashMismatch,
    BodyTooLarge,
    CursorError,
    InflateError,
    IntegrityError,
    LedgerError,
    RefOutOfRange,
    RowRejected,
    SchemaMismatch,
    SymlinkRefused,
    TruncatedBlock,
    UnsupportedCodec,
    WriterBusy,
    WriterPoisoned,
)

__all__ = [
    "LedgerError", "ArchiveError", "BadFileHeader", "BadBlockHeader", "UnsupportedCodec", "BadSegment",
    "IntegrityError", "InflateError", "TruncatedBlock", "RefOutOfRange", "BodyHashMismatch", "SymlinkRefused",
    "SchemaMismatch", "WriterBusy", "WriterPoisoned", "BodyTooLarge", "BlockFull", "RowRejected",
    "CursorError", "WriterLockLost", "LedgerWarning",
]

for _cls in _errors.EXCEPTIONS:
    _cls.__module__ = __name__
del _cls


class WriterLockLost(WriterBusy):
    """A running writer's lock file was deleted or replaced: it stops before writing again.

    A WriterBusy, because another writer may now hold the ledger."""


class LedgerWarning(UserWarning):
    """Something worth saying that stops nothing: a damaged VM-name sidecar ignored, say."""
