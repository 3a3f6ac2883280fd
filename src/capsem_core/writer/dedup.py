"""Cross-block deduplication: which committed span already holds a body's bytes.

A body of ``MIN_ARCHIVE_DEDUP_BYTES`` or more whose bytes a committed row already names is
not stored again; its row names the committed span. ``CommittedSpans`` answers that question
from the index (``event_body_blobs`` by ``body_hash``), behind a Bloom filter that rules out
most new bodies without a query, and counts the spans of a background flush in progress as
committed, so dedup does not depend on when that commit lands.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from capsem_core import format as fmt
from capsem_core.writer.rows import ROW_BLOCK, ROW_HASH, ROW_LEN, ROW_OFFSET, BodyRow

__all__ = ["CommittedSpans", "Span"]

Span = tuple[int, int, int]  # (block_offset, body_offset, body_len)

# 4 MiB of filter, three bits a body: ~0.06% false positives at 1M bodies, ~20% at 10M (each costs
# one indexed lookup of the index, which answers exactly).
_FILTER_BITS_LOG = 25

_LOOKUP_COMMITTED = ("SELECT block_offset, body_offset, body_len FROM event_body_blobs "
                     "WHERE body_hash = ? AND body_len = ? LIMIT 1")


class _CommittedHashes:
    """A Bloom filter over the body hashes of committed rows of 512 bytes or more.

    Cross-block dedup asks the index (``event_body_blobs`` by ``body_hash``) for a committed
    span; this filter answers "certainly not committed" for most new bodies without that
    query. It has no false negatives, so the answers are exactly what the index lookup gives,
    in a fixed 4 MiB however many bodies the ledger holds.
    """

    __slots__ = ("_bits",)
    _MASK = (1 << _FILTER_BITS_LOG) - 1

    def __init__(self) -> None:
        self._bits = bytearray(1 << (_FILTER_BITS_LOG - 3))

    @classmethod
    def _positions(cls, key: int) -> tuple[int, int, int]:
        # BLAKE3 output is uniform, so three slices of its first 64 bits are independent enough.
        mask = cls._MASK
        return key & mask, (key >> 25) & mask, (key >> 39) & mask

    def add_hash_text(self, body_hash: str) -> None:
        """Record ``blake3:<hex>`` (as stored in the index)."""
        bits = self._bits
        for p in self._positions(int(body_hash[7:23], 16)):
            bits[p >> 3] |= 1 << (p & 7)

    def may_hold(self, digest: bytes) -> bool:
        bits = self._bits
        a, b, c = self._positions(int.from_bytes(digest[:8], "big"))
        return bool(bits[a >> 3] & (1 << (a & 7)) and bits[b >> 3] & (1 << (b & 7))
                    and bits[c >> 3] & (1 << (c & 7)))


class CommittedSpans:
    """The committed-span lookup of one writer: the filter, the reader connection, the in-flight spans.

    ``reader`` is a read-only connection of the writer's thread; lookups never touch the
    writer's own connection, which a background flush may be using.
    """

    __slots__ = ("_filter", "_reader", "_inflight")

    def __init__(self) -> None:
        self._filter = _CommittedHashes()
        self._reader: sqlite3.Connection | None = None
        # Spans of bodies >= 512 bytes whose rows a background flush is committing right now:
        # for cross-block dedup they count as committed (their bytes are written and synced
        # before that commit), so dedup does not depend on when the commit lands.
        self._inflight: dict[str, Span] = {}

    def attach(self, reader: sqlite3.Connection) -> None:
        """Use ``reader`` for lookups (closed by ``close``)."""
        self._reader = reader

    def load(self, conn: sqlite3.Connection) -> None:
        """Put every committed hash the index holds into the filter (at open)."""
        add = self._filter.add_hash_text
        for (body_hash,) in conn.execute("SELECT body_hash FROM event_body_blobs WHERE body_len >= ?",
                                         (fmt.MIN_ARCHIVE_DEDUP_BYTES,)):
            if isinstance(body_hash, str) and len(body_hash) == 71:
                add(body_hash)

    def lookup(self, digest: bytes, size: int) -> Span | None:
        """A committed span holding exactly these bytes (cross-block dedup), if the index has one."""
        assert self._reader is not None
        if not self._filter.may_hold(digest):
            return None
        body_hash = "blake3:" + digest.hex()
        try:
            found: Span | None = self._reader.execute(_LOOKUP_COMMITTED, (body_hash, size)).fetchone()
        except sqlite3.Error:
            # A failed lookup only costs a second copy of the body.
            found = None
        if found is None and self._inflight:
            span = self._inflight.get(body_hash)
            if span is not None and span[2] == size:
                return span
        return found

    def committing(self, body_rows: Iterable[BodyRow]) -> None:
        """A background flush is committing these rows: their spans count as committed now."""
        floor = fmt.MIN_ARCHIVE_DEDUP_BYTES
        inflight = self._inflight
        add = self._filter.add_hash_text
        for r in body_rows:
            if r[ROW_LEN] >= floor:
                add(r[ROW_HASH])
                inflight.setdefault(r[ROW_HASH], (r[ROW_BLOCK], r[ROW_OFFSET], r[ROW_LEN]))

    def settled(self) -> None:
        """The background flush is over: its spans are either in the index or back in the buffers."""
        self._inflight.clear()

    def committed(self, body_rows: Iterable[BodyRow]) -> None:
        """These rows committed: the filter must let their hashes through."""
        add = self._filter.add_hash_text
        floor = fmt.MIN_ARCHIVE_DEDUP_BYTES
        for r in body_rows:
            if r[ROW_LEN] >= floor:
                add(r[ROW_HASH])

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
