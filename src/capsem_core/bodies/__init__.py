"""Bodies in bulk: the body index as arrays, selections, and verified batches in one buffer.

``BodyIndex`` (body_index.py) is every event_body_blobs row as numpy arrays and text
columns (columns.py); ``BodyBatch`` (batch.py) the verified bodies of a selection in one
contiguous buffer; read.py resolves selections, plans batches under a byte bound and runs
the native kernel. ``capsem_core.ledger.Ledger`` is the way in: ``index()``,
``read_bodies()``, ``body_batches()``, ``bodies()``.
"""

from capsem_core.bodies.batch import BodyBatch
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.bodies.columns import TextColumn
from capsem_core.bodies.read import DEFAULT_BATCH_BYTES, Errors, Selection

__all__ = ["BodyBatch", "BodyIndex", "DEFAULT_BATCH_BYTES", "Errors", "Selection", "TextColumn"]
