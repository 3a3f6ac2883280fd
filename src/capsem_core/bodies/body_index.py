"""The body index as typed arrays: every archived body's row, in archive order.

``BodyIndex`` is the one shape every reader of event_body_blobs shares (the check's archive
step and verify, the bulk reads, ``Ledger.index()``, a fleet's block ranges): numpy arrays for
the spans and digests, ``Blocks`` for body_blocks, and, when they were read, the keys
(``BodyKeys``: a ``TextColumn`` per text key). ``capsem_core.bodies.scan`` fills it from a
``Snapshot``, natively, with no Python object per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from capsem_core.bodies.columns import Positions, TextColumn
from capsem_core.format import body_hash_text

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Digests = npt.NDArray[np.uint8]


@dataclass(frozen=True, slots=True, eq=False)
class Blocks:
    """body_blocks ordered by ``block_offset``: each block's offset, raw length and on-disk
    extent (``disk_len``, headers included)."""

    block_offset: I64
    raw_len: I64
    disk_len: I64

    def __len__(self) -> int:
        return int(self.block_offset.shape[0])

    def __getitem__(self, name: str) -> I64:
        """A column by name (``blocks["block_offset"]``), as the native kernel reads them."""
        value: I64 = getattr(self, name)
        return value

    def arrays(self) -> dict[str, I64]:
        """The columns by name, as the native kernel takes them."""
        return {"block_offset": self.block_offset, "raw_len": self.raw_len, "disk_len": self.disk_len}

    def take(self, chosen: Positions | Mask | slice) -> Blocks:
        """The blocks at ``chosen`` (positions, a mask or a slice), in offset order still."""
        return Blocks(self.block_offset[chosen], self.raw_len[chosen], self.disk_len[chosen])

    @classmethod
    def of(cls, scanned: dict[str, Any]) -> Blocks:
        return cls(scanned["block_offset"], scanned["raw_len"], scanned["disk_len"])


@dataclass(frozen=True, slots=True, eq=False)
class BodyKeys:
    """The keys of the index's rows, row for row: ``event_id``, ``source_table``,
    ``direction``, ``content_type`` (TextColumns), ``original_bytes``, ``truncated`` and
    ``row_ok`` (False where a span or body_hash column holds another SQL type than it should:
    the row names no body)."""

    event_id: TextColumn
    source_table: TextColumn
    direction: TextColumn
    content_type: TextColumn
    original_bytes: I64
    truncated: Mask
    row_ok: Mask

    def take(self, positions: Positions) -> BodyKeys:
        return BodyKeys(self.event_id.take(positions), self.source_table.take(positions),
                        self.direction.take(positions), self.content_type.take(positions),
                        self.original_bytes[positions], self.truncated[positions], self.row_ok[positions])


class KeysNotRead(ValueError):
    """A key column asked of an index scanned without its keys (the check's: it needs spans)."""


@dataclass(frozen=True, slots=True, eq=False)
class BodyIndex:
    """Every event_body_blobs row, in archive order (block_offset, body_offset, id).

    ``id``, ``block_offset``, ``body_offset``, ``body_len`` (int64), ``digest`` ((n, 32)
    uint8: the row's body_hash decoded; zero where it is malformed), ``hash_ok`` (False where
    body_hash is not "blake3:" + 64 lower-case hex digits); ``blocks``, body_blocks, which
    every subset keeps; and, from ``Ledger.index()`` and the bulk reads, the keys:
    ``event_id``, ``source_table``, ``direction``, ``content_type`` (TextColumns),
    ``original_bytes``, ``truncated``, ``row_ok`` (see ``BodyKeys``). Positions
    (``index[positions]``, ``Ledger.read_bodies(positions, index=...)``) count rows of this
    order. A snapshot: it never changes as the ledger grows.
    """

    id: I64
    block_offset: I64
    body_offset: I64
    body_len: I64
    digest: Digests
    hash_ok: Mask
    blocks: Blocks
    keys: BodyKeys | None = None

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def _keys(self) -> BodyKeys:
        if self.keys is None:
            raise KeysNotRead("this body index was read without its keys (scan it with keys=True)")
        return self.keys

    @property
    def event_id(self) -> TextColumn:
        return self._keys().event_id

    @property
    def source_table(self) -> TextColumn:
        return self._keys().source_table

    @property
    def direction(self) -> TextColumn:
        return self._keys().direction

    @property
    def content_type(self) -> TextColumn:
        return self._keys().content_type

    @property
    def original_bytes(self) -> I64:
        return self._keys().original_bytes

    @property
    def truncated(self) -> Mask:
        return self._keys().truncated

    @property
    def row_ok(self) -> Mask:
        """False where the row names no body; without keys, every row is taken as it reads."""
        return self.keys.row_ok if self.keys is not None else np.ones(len(self), np.bool_)

    def take(self, positions: Positions) -> BodyIndex:
        """The rows at ``positions`` (kept in the order given), with the same blocks."""
        positions = np.asarray(positions, np.intp)
        return BodyIndex(self.id[positions], self.block_offset[positions], self.body_offset[positions],
                         self.body_len[positions], self.digest[positions], self.hash_ok[positions], self.blocks,
                         None if self.keys is None else self.keys.take(positions))

    def __getitem__(self, key: slice | npt.NDArray[Any]) -> BodyIndex:
        """``index[positions]``, ``index[mask]`` or ``index[a:b]``: the rows chosen."""
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        key = np.asarray(key)
        return self.take(np.flatnonzero(key) if key.dtype == np.bool_ else key.astype(np.intp, copy=False))

    def key(self, i: int) -> tuple[str | None, str | None, str | None]:
        """(event_id, source_table, direction) of row i."""
        return self.event_id[i], self.source_table[i], self.direction[i]

    def hash_text(self, i: int) -> str:
        """Row i's body hash as the index writes it ("blake3:" + hex)."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a row is chosen by an int, not {type(i).__name__}")
        return body_hash_text(bytes(self.digest[i]))

    def kernel_rows(self) -> dict[str, Any]:
        """The arrays the native verify kernel reads, by name."""
        return {"id": self.id, "block_offset": self.block_offset, "body_offset": self.body_offset,
                "body_len": self.body_len, "digest": self.digest, "hash_ok": self.hash_ok}

    def in_blocks(self, chosen: Mask) -> tuple[BodyIndex, Blocks]:
        """The rows of the blocks ``chosen`` (a mask over ``blocks``), and any row naming no
        recorded block (the kernel reports it), with those blocks: a part of the ledger one
        kernel run reads (rows stay in archive order)."""
        k_off = self.blocks.block_offset
        slot = np.minimum(np.searchsorted(k_off, self.block_offset), max(len(k_off) - 1, 0))
        named = (k_off[slot] == self.block_offset) if len(k_off) else np.zeros(len(self), np.bool_)
        rows = np.ones(len(self), np.bool_)
        rows[named] = chosen[slot[named]]
        return self.take(np.flatnonzero(rows)), self.blocks.take(chosen)


__all__ = ["BodyIndex", "BodyKeys", "Blocks", "KeysNotRead"]
