"""Columns: a ledger's tables as Arrow data that pyarrow, polars and DuckDB read directly.

The package owns the columnar read of session.db and the Arrow form of bodies:

* :mod:`~capsem_core.columns.plan` — where a scan finds a table's values (record columns,
  the rowid, REAL affinity) and whether it may read them from the pages;
* :mod:`~capsem_core.columns.cursor` — scan cursors (``sc1.``) and the checks every cursor
  meets in a snapshot;
* :mod:`~capsem_core.columns.scan` — ``Scan`` (``Ledger.scan``): one table's rows as a
  stream of record batches (``__arrow_c_stream__``), one snapshot per stream;
* :mod:`~capsem_core.columns.bodies` — a ``BodyBatch`` as an Arrow struct array whose
  ``data`` column is the batch's own buffer.

The native half is ``capsem_core._native._columns`` (``_native/columns/``). Nothing here
depends on pyarrow: the data crosses as the Arrow C data interface's structures, in the
PyCapsules every Arrow library reads.
"""

from __future__ import annotations

from capsem_core.columns.scan import Scan, open_scan

__all__ = ["Scan", "open_scan"]
