"""The ``session.db`` schema of the archive-format-v2 era, and the check that refuses any other.

The package owns:

* :mod:`~capsem_core.schema.vocabulary` — the vocabularies the CHECKs enforce (event types,
  source tables, directions, statuses);
* :mod:`~capsem_core.schema.columns` — the column shapes the DDL repeats;
* the DDL of every table a v2-era ledger holds (16 session tables plus the transport ledger
  ``transport_events`` / ``transport_schema``), with every column, default, CHECK, UNIQUE,
  the one foreign key and all 91 declared indexes, in Capsem's creation order, by family:
  :mod:`~capsem_core.schema.tables_traffic`, :mod:`~capsem_core.schema.tables_guest`,
  :mod:`~capsem_core.schema.tables_security`, joined in :mod:`~capsem_core.schema.tables`;
* :mod:`~capsem_core.schema.create` — ``create_schema`` and ``table_columns``;
* :mod:`~capsem_core.schema.check` — ``check_schema``, "no migrations";
* :mod:`~capsem_core.schema.ready` — ``ReadyCheck``, the cheap readiness probe.

The DDL is transcribed from the v2-era reference (Capsem ``ddl.rs`` at 843715b); the
catalog it produces is locked by ``tests/golden/schema_v2_catalog.json``.
"""

from __future__ import annotations

from capsem_core.schema.check import check_schema, required_columns
from capsem_core.schema.create import create_schema, table_columns
from capsem_core.schema.ready import ReadyCheck
from capsem_core.schema.tables import (
    SCHEMA_SQL, SESSION_SQL, SESSION_TABLES, TABLES, TRANSPORT_SQL, TRANSPORT_TABLES,
)
from capsem_core.schema.vocabulary import (
    ASK_STATUSES, BODY_DIRECTIONS, BODY_EVENT_TYPES, BODY_SOURCE_TABLES, DECISION_STAGES, DECISIONS,
    DETECTION_LEVELS, FS_KINDS, LATER_ERA_TABLES, MODEL_ITEM_KINDS, MODEL_PROTOCOLS, MUTATION_STATUSES,
    RULE_ACTIONS, SECURITY_EVENT_TYPES, SECURITY_TABLES, SUBSTITUTION_OUTCOMES, TOOL_CALL_STATUSES,
    TOOL_TRANSPORTS, TRANSPORT_EVENT_JSON_MAX_BYTES, TRANSPORT_EVENT_TYPES, TRANSPORT_SCHEMA_VERSION,
)

__all__ = [
    "ASK_STATUSES", "BODY_DIRECTIONS", "BODY_EVENT_TYPES", "BODY_SOURCE_TABLES", "DECISIONS",
    "DECISION_STAGES", "DETECTION_LEVELS", "FS_KINDS", "LATER_ERA_TABLES", "MODEL_ITEM_KINDS",
    "MODEL_PROTOCOLS", "MUTATION_STATUSES", "RULE_ACTIONS", "ReadyCheck", "SCHEMA_SQL",
    "SECURITY_EVENT_TYPES", "SECURITY_TABLES", "SESSION_SQL", "SESSION_TABLES", "SUBSTITUTION_OUTCOMES",
    "TABLES", "TOOL_CALL_STATUSES", "TOOL_TRANSPORTS", "TRANSPORT_EVENT_JSON_MAX_BYTES",
    "TRANSPORT_EVENT_TYPES", "TRANSPORT_SCHEMA_VERSION", "TRANSPORT_SQL", "TRANSPORT_TABLES",
    "check_schema", "create_schema", "required_columns", "table_columns",
]
