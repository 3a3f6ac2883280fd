"""What the local runner's fork server loads once, so that each ledger's check process, forked
from it, starts warm: the check code itself, and what every check computes the first time
in a process (the reference columns of this build's schema, read back from an in-memory
database: about half of a small ledger's check when done cold)."""

from __future__ import annotations

from capsem_core.fleet import task  # noqa: F401  (the checks, imported once)
from capsem_core.schema.create import table_columns
from capsem_core.schema.tables import TABLES

table_columns(TABLES[0])  # fills the cache of every table's reference columns

