"""Bodies in bulk: the body index as arrays, selections, and verified batches in one buffer.

``BodyIndex`` (body_index.py) is every event_body_blobs row as numpy arrays and text
columns (columns.py), read from a snapshot by scan.py; ``BodyBatch`` (batch.py) the verified
bodies of a selection in one contiguous buffer; read.py resolves selections, plans batches
under a byte bound and runs the verify kernel. ``capsem_core.ledger.Ledger`` is the way in:
``index()``, ``read_bodies()``, ``body_batches()``, ``bodies()``. The names below load with
their module, when first used (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capsem_core.bodies.batch import BodyBatch
    from capsem_core.bodies.body_index import BodyIndex
    from capsem_core.bodies.columns import TextColumn
    from capsem_core.bodies.read import DEFAULT_BATCH_BYTES, Errors, Selection

_HOMES = {"BodyBatch": "batch", "BodyIndex": "body_index", "TextColumn": "columns", "DEFAULT_BATCH_BYTES": "read",
          "Errors": "read", "Selection": "read"}

__all__ = ["BodyBatch", "BodyIndex", "DEFAULT_BATCH_BYTES", "Errors", "Selection", "TextColumn"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
