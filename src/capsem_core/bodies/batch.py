"""``BodyBatch``: verified bodies in one contiguous buffer, with their keys as arrays.

The batch is the bulk read's result. Its buffer is what the native kernel copied the
verified bodies into; ``batch[i]`` is a zero-copy read-only memoryview of body i, and the
batch itself exposes the whole buffer through the buffer protocol. The keys (event_id,
source_table, direction, content_type), ids and digests stay arrays, so nothing per body
is built until it is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from capsem_core._native._archive import ReadOnlyBytes
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.bodies.columns import TextColumn
from capsem_core.verify import BodyFault


class BodyBatch(ReadOnlyBytes):
    """Verified bodies in archive order, in one buffer.

    ``len(batch)`` bodies; ``batch[i]`` is body i as a read-only memoryview into the buffer
    (no copy; ``bytes(batch[i])`` copies it); ``offsets`` and ``lengths`` (int64) say where
    each lies in ``buffer`` (a read-only uint8 numpy array), and ``memoryview(batch)`` is the
    whole buffer. ``rows`` is the BodyIndex of the batch's bodies (entry i is body i), whose
    arrays are also here: ``id``, ``event_id``, ``source_table``, ``direction``,
    ``content_type`` (TextColumns), ``digest`` ((n, 32) uint8), ``original_bytes``,
    ``truncated``. ``ok[i]`` is False only with errors="report", for a body that did not
    verify (its entry is then empty); ``findings`` lists every body that did not verify
    (errors="skip" or "report"), as ``capsem_core.verify.BodyFault`` values. Bytes of a body
    that did not verify are never in the buffer (its slot, if any, is zeroed).
    """

    buffer: npt.NDArray[np.uint8]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    ok: npt.NDArray[np.bool_]
    rows: BodyIndex
    findings: list[BodyFault]

    def __init__(self, buffer: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
                 lengths: npt.NDArray[np.int64], rows: BodyIndex, ok: npt.NDArray[np.bool_],
                 findings: list[BodyFault]) -> None:
        super().__init__(buffer)
        buffer.flags.writeable = False
        self.buffer = buffer
        self.offsets = offsets
        self.lengths = lengths
        self.rows = rows
        self.ok = ok
        self.findings = findings
        # A view of the array, not of self: a memoryview of self held by self would be a
        # reference cycle, and the buffer would wait for the cyclic collector to be freed.
        self._view = buffer.data

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    def __getitem__(self, i: int) -> memoryview:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"body {i} of a {n}-body batch")
        a = int(self.offsets[i])
        return self._view[a:a + int(self.lengths[i])]

    def __iter__(self) -> Iterator[memoryview]:
        view = self._view
        for a, n in zip(self.offsets.tolist(), self.lengths.tolist()):
            yield view[a:a + n]

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer."""
        return int(self.buffer.shape[0])

    @property
    def id(self) -> npt.NDArray[np.int64]:
        """event_body_blobs row ids."""
        return self.rows.id

    @property
    def event_id(self) -> TextColumn:
        return self.rows.event_id

    @property
    def source_table(self) -> TextColumn:
        return self.rows.source_table

    @property
    def direction(self) -> TextColumn:
        return self.rows.direction

    @property
    def content_type(self) -> TextColumn:
        return self.rows.content_type

    @property
    def digest(self) -> npt.NDArray[np.uint8]:
        """Each body's BLAKE3 digest, (n, 32) uint8."""
        return self.rows.digest

    @property
    def original_bytes(self) -> npt.NDArray[np.int64]:
        return self.rows.original_bytes

    @property
    def truncated(self) -> npt.NDArray[np.bool_]:
        return self.rows.truncated

    def key(self, i: int) -> tuple[str | None, str | None, str | None]:
        """(event_id, source_table, direction) of body i."""
        return self.rows.key(i)

    def hash_text(self, i: int) -> str:
        """Body i's hash as the index writes it ("blake3:" + hex)."""
        return self.rows.hash_text(i)

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[Any, Any]:
        """The batch as an Arrow struct array ("arrow_schema", "arrow_array" capsules): the
        keys, then ``data`` as large_binary over this batch's own buffer, no body copied
        (``capsem_core.columns.bodies``). The arrays keep the batch alive."""
        from capsem_core.columns.bodies import batch_capsules
        return batch_capsules(self)

    def __arrow_c_stream__(self, requested_schema: object = None) -> Any:
        """The same as a stream of one record batch ("arrow_array_stream")."""
        from capsem_core.columns.bodies import batch_stream
        return batch_stream(self)

    def __repr__(self) -> str:
        return f"BodyBatch({len(self)} bodies, {self.nbytes} bytes, {len(self.findings)} findings)"


__all__ = ["BodyBatch"]
