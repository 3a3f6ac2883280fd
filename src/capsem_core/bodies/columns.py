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

from capsem_core.db import exact_text

Positions = npt.NDArray[np.intp]

_EMPTY = np.zeros(0, np.uint8)




class TextColumn:
    """One text column: row i is a UTF-8 text, or None (SQL NULL).

    Stored as the scan produced it: ``data`` (every stored value's bytes end to end),
    ``offsets`` (stored value j is ``data[offsets[j]:offsets[j + 1]]``), ``null`` (per stored
    value), and ``rows`` (row i is stored value ``rows[i]``; None: row i is value i), so a
    subset or a reordering (``take``) moves integers, never bytes. ``compact()`` gives the
    plain layout (rows None) when a caller wants the bytes of its rows end to end.

    ``column[i]`` is one value (a ``str``, built when asked), ``column[positions]`` (an
    integer array, a slice or a boolean mask) a new column of those rows, ``column ==
    "text"`` a boolean mask, ``tolist()`` every value. A column is a value: nothing changes
    its arrays."""

    __slots__ = ("data", "offsets", "null", "rows")

    def __init__(self, data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
                 null: npt.NDArray[np.bool_] | None = None, rows: Positions | None = None) -> None:
        n = offsets.shape[0] - 1
        if n < 0:
            raise ValueError("a text column's offsets hold one more entry than it has values")
        self.data = data
        self.offsets = offsets
        self.null = null if null is not None else np.zeros(n, np.bool_)
        if self.null.shape[0] != n:
            raise ValueError("a text column's null mask differs in length from its values")
        if rows is not None and rows.shape[0] and (rows.min() < 0 or rows.max() >= n):
            raise IndexError("a row names a value outside the column")
        self.rows = rows

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
        return int(self.rows.shape[0] if self.rows is not None else self.offsets.shape[0] - 1)

    def _stored(self, positions: Positions | None = None) -> Positions:
        """The stored value of each row at ``positions`` (all rows when None)."""
        if positions is None:
            return self.rows if self.rows is not None else np.arange(len(self), dtype=np.intp)
        return self.rows[positions] if self.rows is not None else positions

    def lengths(self) -> npt.NDArray[np.int64]:
        """Bytes of each row's UTF-8 text (0 for NULL)."""
        lens: npt.NDArray[np.int64] = np.diff(self.offsets)
        return lens if self.rows is None else lens[self.rows]

    def nulls(self) -> npt.NDArray[np.bool_]:
        """Each row's NULL flag."""
        return self.null if self.rows is None else self.null[self.rows]

    def value(self, i: int) -> str | None:
        """Row i's text (negative i counts from the end), None for NULL."""
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} of a {n}-row column")
        j = int(self.rows[i]) if self.rows is not None else i
        if self.null[j]:
            return None
        a, b = int(self.offsets[j]), int(self.offsets[j + 1])
        return exact_text(self.data[a:b].tobytes())

    @overload
    def __getitem__(self, key: int) -> str | None: ...
    @overload
    def __getitem__(self, key: slice | npt.NDArray[Any]) -> TextColumn: ...

    def __getitem__(self, key: int | slice | npt.NDArray[Any]) -> str | None | TextColumn:
        if isinstance(key, (bool, np.bool_)):
            raise TypeError("a row is chosen by an int (or positions, a mask or a slice), not a bool")
        if isinstance(key, (int, np.integer)):
            return self.value(int(key))
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        key = np.asarray(key)
        if key.dtype == np.bool_ and key.ndim == 1:
            return self.take(np.flatnonzero(key))
        if key.ndim != 1 or (key.dtype.kind not in "iu" and key.size):   # [] is no row
            # As numpy itself: 1.5 or [1.5] chooses no row (astype would have taken row 1).
            raise TypeError("a row is chosen by an int (or positions, a mask or a slice), "
                            f"not {type(key.item()).__name__ if key.ndim == 0 else f'an array of {key.dtype}'}")
        return self.take(key.astype(np.intp, copy=False))

    def take(self, positions: Positions) -> TextColumn:
        """The rows at ``positions`` (in that order): the same bytes, other row numbers."""
        positions = np.asarray(positions, np.intp)
        if positions.shape[0] and (positions.min() < -len(self) or positions.max() >= len(self)):
            raise IndexError("a position is outside the column")
        return TextColumn(self.data, self.offsets, self.null, self._stored(positions % max(len(self), 1)))

    def compact(self) -> TextColumn:
        """The same rows with their bytes end to end in row order (rows None), gathered
        without a Python object per row."""
        if self.rows is None:
            return self
        rows = self.rows
        starts = self.offsets[:-1][rows]
        lens = self.offsets[1:][rows] - starts
        offsets = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        total = int(offsets[-1])
        # Each output byte's source: its row's start, plus its place within the row.
        shift = np.repeat(starts - offsets[:-1], lens)
        data = self.data[shift + np.arange(total, dtype=np.int64)] if total else _EMPTY
        return TextColumn(data, offsets, self.null[rows])

    def equals(self, value: str) -> npt.NDArray[np.bool_]:
        """A mask of the rows whose text is exactly ``value`` (never the NULL rows)."""
        want = np.frombuffer(value.encode("utf-8", "surrogateescape"), np.uint8)
        lens = np.diff(self.offsets)
        stored: npt.NDArray[np.bool_] = (lens == want.shape[0]) & ~self.null
        if want.shape[0]:
            cand = np.flatnonzero(stored)
            # Compare in slices of values so the gathered matrix stays small.
            step = max(1, (1 << 22) // want.shape[0])
            for k in range(0, cand.shape[0], step):
                chunk = cand[k:k + step]
                gathered = self.data[self.offsets[chunk][:, None] + np.arange(want.shape[0])]
                stored[chunk] = np.all(gathered == want, axis=1)
        return stored if self.rows is None else stored[self.rows]

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
