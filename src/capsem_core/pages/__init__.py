"""session.db read from its own pages: the Python side of ``capsem_core._native._pages``.

Where a reader's snapshot is the database file itself, its pages are read natively through a
read-only map, with no SQL and no object per row:

* :mod:`~capsem_core.pages.tables` — whether the map is the snapshot, and which record
  column holds which declared column;
* :mod:`~capsem_core.pages.check` — the page check: ``quick_check`` per table and the page
  map (every page's one owner), with :mod:`~capsem_core.pages.words` wording its findings;
* :mod:`~capsem_core.pages.index` — the body index's columns;
* :mod:`~capsem_core.pages.graph` — the identity graph's join columns, and whether each
  part holds; :mod:`~capsem_core.pages.lifecycle` — the tool lifecycle's counts from them;
  :mod:`~capsem_core.pages.usage` — the tool usage table from the same scan.

Anything the pages cannot answer exactly as SQL would (a damaged tree, a value of another
kind, a table of another shape) answers None, and the caller runs the SQL.
"""
