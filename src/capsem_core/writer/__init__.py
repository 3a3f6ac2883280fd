"""Writing a Capsem session ledger: the ``session.bodies`` appender and the ledger writer.

* ``archive``: ``BodyArchiveWriter`` appends to one ``session.bodies`` file (format v2).
* ``ledger``: ``LedgerWriter`` owns a ledger directory (lock, connection, insert, close).
* ``lock``: the writer lock (Capsem's lock file, the directory's flock, the flush-time check).
* ``rows``: ``Body``, ``ledger_timestamp``, table specs, batches, multi-row INSERTs.
* ``staging``: bodies into the archive, segment cuts, taking the archive out of service.
* ``dedup``: the committed-hash filter and the committed-span lookup.
* ``flush``: the flush job, its background thread, commit, restore and salvage.

Codec 1 is Capsem's raw deflate; codec 2 (zstd) is this project's opt-in extension, which
Capsem cannot read. ``docs/format.md`` describes both. The names here are the package's
public API (what ``capsem_core.writer`` and the old ``capsem_core.archive_writer`` exported).
"""

from __future__ import annotations

from capsem_core.lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from capsem_core.writer.archive import ZSTD_WINDOW_LOG, BodyArchiveWriter, SegmentWritten, codec_id
    from capsem_core.writer.ledger import LedgerWriter
    from capsem_core.writer.rows import BODY_DIRECTIONS, Body, ledger_timestamp
del TYPE_CHECKING

# Each public name and the module defining it: ``rows`` (the events' time stamps) loads
# without the archive's and the writer's numpy.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("ZSTD_WINDOW_LOG", "BodyArchiveWriter", "SegmentWritten", "codec_id"), "archive"),
    "LedgerWriter": "ledger",
    **dict.fromkeys(("BODY_DIRECTIONS", "Body", "ledger_timestamp"), "rows"),
}

# Spelled out: type checkers read exports from a literal list only.
__all__ = [
    "BODY_DIRECTIONS",
    "Body",
    "BodyArchiveWriter",
    "LedgerWriter",
    "SegmentWritten",
    "ZSTD_WINDOW_LOG",
    "codec_id",
    "ledger_timestamp",
]
__getattr__, __dir__ = attach(globals(), _HOMES)
