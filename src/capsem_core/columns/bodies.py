"""A ``BodyBatch`` as Arrow: its keys and its bodies as one struct array, no body copied.

The bulk read lays a batch's bodies end to end in one buffer, in batch order, each verified
body in its own slot (rows naming the same span each get a slot), with no gap between them:
``offsets[i + 1] == offsets[i] + lengths[i]`` (a damaged body the caller asked to keep is
empty, one left out leaves no gap: ``bodies.read`` closes them). So the ``data`` column is a
``large_binary`` array whose data buffer is the batch's own and whose n + 1 int64 offsets are
``offsets`` with the total appended; the key columns are the batch's arrays as they are
(``large_utf8`` texts, or ``large_binary`` for a key column holding text that is not UTF-8,
which Arrow's utf8 may not carry). The arrays hold the BodyBatch itself: it lives until the
consumer has released every array it was given (the release, from any thread, drops that
reference under the GIL).

Columns: ``id`` int64, ``event_id``, ``source_table``, ``direction``, ``content_type``
(text), ``original_bytes`` int64, ``truncated`` bool, ``digest`` fixed_size_binary(32),
``ok`` bool, ``data`` large_binary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from capsem_core._native import _columns
from capsem_core.bodies.columns import TextColumn

if TYPE_CHECKING:
    from capsem_core.bodies.batch import BodyBatch

Field = tuple[str, str, int, tuple[Any, ...]]


def _bits(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """A boolean array as Arrow's bits (least significant first)."""
    return np.packbits(np.ascontiguousarray(mask, np.bool_), bitorder="little")


def _text(name: str, column: TextColumn) -> Field:
    plain = column.compact()
    offsets = np.ascontiguousarray(plain.offsets, np.int64)
    data = np.ascontiguousarray(plain.data, np.uint8)
    null = np.asarray(plain.null, np.bool_)
    nulls = int(null.sum())
    validity = _bits(~null) if nulls else None
    fmt = "U" if _columns.utf8_valid(data, offsets) else "Z"
    return (name, fmt, nulls, (validity, offsets, data))


def _int64(name: str, values: npt.NDArray[Any]) -> Field:
    return (name, "l", 0, (None, np.ascontiguousarray(values, np.int64)))


def _bool(name: str, values: npt.NDArray[Any]) -> Field:
    return (name, "b", 0, (None, _bits(np.asarray(values, np.bool_))))


def batch_capsules(batch: BodyBatch) -> tuple[Any, Any]:
    """("arrow_schema", "arrow_array") capsules of the batch as a struct array (the module's
    columns), lending the batch's buffers; the arrays keep ``batch`` alive."""
    n = len(batch)
    offsets = np.empty(n + 1, np.int64)
    offsets[:n] = batch.offsets
    offsets[n] = int(batch.offsets[-1] + batch.lengths[-1]) if n else 0
    if n and (offsets[0] != 0 or np.any(offsets[1:n] != batch.offsets[:-1] + batch.lengths[:-1])
              or offsets[n] > batch.nbytes):
        raise ValueError("the batch's bodies do not lie end to end in its buffer")
    rows = batch.rows
    digest = np.ascontiguousarray(batch.digest, np.uint8)
    fields = [
        _int64("id", batch.id),
        _text("event_id", rows.event_id),
        _text("source_table", rows.source_table),
        _text("direction", rows.direction),
        _text("content_type", rows.content_type),
        _int64("original_bytes", batch.original_bytes),
        _bool("truncated", batch.truncated),
        ("digest", "w:32", 0, (None, digest)),
        _bool("ok", batch.ok),
        ("data", "Z", 0, (None, offsets, batch.buffer)),
    ]
    keep = (batch, fields)
    return _columns.export_arrays(fields, n, keep)


def batch_stream(batch: BodyBatch) -> Any:
    """An "arrow_array_stream" capsule of the batch as its one record batch."""
    return _columns.stream_of(*batch_capsules(batch))


__all__ = ["batch_capsules", "batch_stream"]
