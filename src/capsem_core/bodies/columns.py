"""Text columns of the body index as arrays: one buffer of UTF-8 bytes, offsets, a NULL mask.

The index's keys (event_id, source_table, direction, content_type) come out of the native
key scan as bytes end to end, so a million rows cost three arrays, not a million strings.
``TextColumn`` owns reading them: one value as ``str`` when it is asked for, a subset by
positions (numpy gathers, no Python object per row), and equality with one value as a mask.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, overload

import numpy as np
import numpy.typing as npt

Positions = npt.NDArray[np.intp]

_EMPTY = np.zeros(0, np.uint8)


def _decode(raw: bytes) -> str:
    # A hostile index can hold bytes that are not UTF-8: keep them (surrogateescape) so the
    # value still round-trips to the same SQL text; terminals sanitize what they show.
    return raw.decode("utf-8", "surrogateescape")


class TextColumn:
    """One text column of n rows: row i is ``data[offsets[i]:offsets[i + 1]]`` decoded as
    UTF-8, or None where ``null[i]``.

    ``column[i]`` is one value (a ``str``, built when asked), ``column[positions]`` (an
    integer array, a slice or a boolean mask) a new column of those rows, ``column ==
    "text"`` a boolean mask, ``tolist()`` every value. Arrays are read-only views: a column
    is a value."""

    __slots__ = ("data", "offsets", "null")

    def __init__(self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
                 null: npt.NDArray[np.bool_] | None = None) -> None:
        n = offsets.shape[0] - 1
        if n < 0:
            raise ValueError("a text column's offsets hold one more entry than it has rows")
        self.data = data
        self.offsets = offsets
        self.null = null if null is not None else np.zeros(n, np.bool_)
        if self.null.shape[0] != n:
            raise ValueError("a text column's null mask differs in length from its rows")

    @classmethod
    def from_strings(cls, values: list[str | None]) -> TextColumn:
        """A column of the given values (for small, hand-made columns)."""
        raw = [b"" if v is None else v.encode("utf-8", "surrogateescape") for v in values]
        lens = np.fromiter((len(r) for r in raw), np.int64, len(raw))
        offsets = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        data = np.frombuffer(b"".join(raw), np.uint8).copy() if raw else _EMPTY
        return cls(data, offsets, np.array([v is None for v in values], np.bool_))

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def lengths(self) -> npt.NDArray[np.int64]:
        """Bytes of each row's UTF-8 text (0 for NULL)."""
        lens: npt.NDArray[np.int64] = np.diff(self.offsets)
        return lens

    def value(self, i: int) -> str | None:
        """Row i's text (negative i counts from the end), None for NULL."""
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} of a {n}-row column")
        if self.null[i]:
            return None
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return _decode(self.data[a:b].tobytes())

    @overload
    def __getitem__(self, key: int) -> str | None: ...
    @overload
    def __getitem__(self, key: slice | npt.NDArray[Any]) -> TextColumn: ...

    def __getitem__(self, key: int | slice | npt.NDArray[Any]) -> str | None | TextColumn:
        if isinstance(key, (int, np.integer)):
            return self.value(int(key))
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        key = np.asarray(key)
        if key.dtype == np.bool_:
            return self.take(np.flatnonzero(key))
        return self.take(key.astype(np.intp, copy=False))

    def take(self, positions: Positions) -> TextColumn:
        """The rows at ``positions`` (in that order), gathered without a Python object per row."""
        positions = np.asarray(positions, np.intp)
        n = positions.shape[0]
        if n and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError("a position is outside the column")
        starts = self.offsets[:-1][positions]
        lens = self.offsets[1:][positions] - starts
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        if n and np.all(np.diff(positions) == 1):
            # A run of consecutive rows: its bytes are one slice.
            a = int(self.offsets[positions[0]])
            data = self.data[a:a + int(offsets[-1])]
        else:
            total = int(offsets[-1])
            # Each output byte's source: its row's start, plus its place within the row.
            shift = np.repeat(starts - offsets[:-1], lens)
            data = self.data[shift + np.arange(total, dtype=np.int64)] if total else _EMPTY
        return TextColumn(data, offsets, self.null[positions])

    def equals(self, value: str) -> npt.NDArray[np.bool_]:
        """A mask of the rows whose text is exactly ``value`` (never the NULL rows)."""
        want = np.frombuffer(value.encode("utf-8", "surrogateescape"), np.uint8)
        lens = self.lengths()
        mask: npt.NDArray[np.bool_] = (lens == want.shape[0]) & ~self.null
        if want.shape[0] == 0:
            return mask
        rows = np.flatnonzero(mask)
        if rows.shape[0]:
            # Compare in slices of rows so the gathered matrix stays small.
            step = max(1, (1 << 22) // want.shape[0])
            for k in range(0, rows.shape[0], step):
                chunk = rows[k:k + step]
                gathered = self.data[self.offsets[chunk][:, None] + np.arange(want.shape[0])]
                mask[chunk] = np.all(gathered == want, axis=1)
        return mask

    def __eq__(self, other: object) -> Any:
        if isinstance(other, str):
            return self.equals(other)
        if isinstance(other, TextColumn):
            return self.tolist() == other.tolist()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[str | None]:
        for i in range(len(self)):
            yield self.value(i)

    def tolist(self) -> list[str | None]:
        """Every value, as Python strings (one object per row: for small columns)."""
        return list(self)

    def __repr__(self) -> str:
        head = ", ".join(repr(v) for v in self.tolist()[:3]) if len(self) else ""
        more = ", ..." if len(self) > 3 else ""
        return f"TextColumn({len(self)} rows: [{head}{more}])"


__all__ = ["TextColumn"]
