"""capsem-core: read, verify and write Capsem session ledgers (session.db + session.bodies).

The front door: what an embedder needs, importable from here::

    from capsem_core import Ledger, LedgerWriter, Body, LedgerError, check_ledger

``Ledger`` reads a ledger pair (verified bodies, bulk reads, events, verify); ``LedgerWriter``
and ``Body`` write one as Capsem does; ``check_ledger`` gives the doctor's report
(``CheckReport``); every error is a ``LedgerError`` (``capsem_core.errors`` has its kinds).
Each name loads its module when it is first used (PEP 562), so importing the package costs
nothing until then. docs/api.md describes them.
"""

from __future__ import annotations

# The one place the version is written: pyproject.toml reads it from here at build time.
__version__ = "0.1.0"

# Not typing's: this module imports nothing at all when it loads, so the window in which a
# Ctrl-C meets capsem-ledger before its own handling starts is as short as it can be
# (importing typing took most of the command line's first 20 ms). Type checkers read it alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from capsem_core.bodies.batch import BodyBatch
    from capsem_core.bodies.body_index import BodyIndex
    from capsem_core.bodies.read import BodyRecord
    from capsem_core.check.incremental import VerifyOptions, VerifyResult
    from capsem_core.check.report import CheckReport
    from capsem_core.check.run import check_ledger
    from capsem_core.errors import (
        ArchiveError,
        BodyHashMismatch,
        CursorError,
        LedgerError,
        SchemaMismatch,
        SymlinkRefused,
        WriterBusy,
    )
    from capsem_core.events.reader import Event, EventPage
    from capsem_core.ledger import Ledger, copy_ledger, delete_ledger
    from capsem_core.verify import BodyFault
    from capsem_core.writer.ledger import LedgerWriter
    from capsem_core.writer.rows import Body
del TYPE_CHECKING

# Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    "Ledger": "ledger", "BodyRecord": "bodies.read", "copy_ledger": "ledger", "delete_ledger": "ledger",
    "LedgerWriter": "writer.ledger", "Body": "writer.rows",
    "BodyIndex": "bodies.body_index", "BodyBatch": "bodies.batch", "BodyFault": "verify",
    "Event": "events.reader", "EventPage": "events.reader",
    "check_ledger": "check.run", "CheckReport": "check.report",
    "VerifyOptions": "check.incremental", "VerifyResult": "check.incremental",
    **{name: "errors" for name in ("LedgerError", "ArchiveError", "BodyHashMismatch", "CursorError",
                                   "SchemaMismatch", "SymlinkRefused", "WriterBusy")},
}

# Spelled out: type checkers read a package's exports from a literal list only (with
# ``*_HOMES`` mypy --strict refused ``from capsem_core import Ledger``).
__all__ = [
    "__version__",
    "Ledger", "BodyRecord", "copy_ledger", "delete_ledger", "LedgerWriter", "Body", "BodyIndex", "BodyBatch",
    "BodyFault", "Event", "EventPage", "check_ledger", "CheckReport", "VerifyOptions", "VerifyResult",
    "LedgerError", "ArchiveError", "BodyHashMismatch", "CursorError", "SchemaMismatch", "SymlinkRefused",
    "WriterBusy",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value   # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
