"""The v2 DDL as one script: the table families in Capsem's creation order, the indexes Capsem
creates across tables, and the transport ledger (reference sections 3.17-3.18 and 4-5).

Capsem creates the session tables in one fixed order, and that order is what a new
``session.db``'s pages follow, so the families are joined here in exactly that order:
:mod:`~capsem_core.schema.tables_traffic` (3.1-3.7), :mod:`~capsem_core.schema.tables_guest`
(3.8-3.12), :mod:`~capsem_core.schema.tables_security` (3.13-3.16), then the cross-table
indexes below. The catalog it produces is locked by ``tests/golden/schema_v2_catalog.json``.
"""

from __future__ import annotations

import re

from capsem_core.schema.columns import HEX12, one_of
from capsem_core.schema.tables_guest import GUEST_SQL
from capsem_core.schema.tables_security import SECURITY_SQL
from capsem_core.schema.tables_traffic import TRAFFIC_SQL
from capsem_core.schema.vocabulary import (
    TRANSPORT_EVENT_JSON_MAX_BYTES, TRANSPORT_EVENT_TYPES, TRANSPORT_SCHEMA_VERSION,
)

# The correlation indexes (turn_id, credential_ref, trace_id, event_id) Capsem adds last,
# over tables of every family.
CROSS_TABLE_INDEX_SQL: str = """
CREATE INDEX IF NOT EXISTS idx_net_events_turn_id ON net_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_model_calls_turn_id ON model_calls(turn_id);
CREATE INDEX IF NOT EXISTS idx_model_items_turn_id ON model_items(turn_id);
CREATE INDEX IF NOT EXISTS idx_tool_calls_turn_id ON tool_calls(turn_id);
CREATE INDEX IF NOT EXISTS idx_tool_responses_turn_id ON tool_responses(turn_id);
CREATE INDEX IF NOT EXISTS idx_event_body_blobs_turn_id ON event_body_blobs(turn_id);
CREATE INDEX IF NOT EXISTS idx_fs_events_turn_id ON fs_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_turn_id ON exec_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_dns_events_turn_id ON dns_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_audit_events_turn_id ON audit_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_substitution_events_turn_id ON substitution_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_turn_id ON security_rule_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_turn_id ON security_decision_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_security_ask_events_turn_id ON security_ask_events(turn_id);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_credential_ref ON security_rule_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_credential_ref ON security_decision_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_net_events_credential_ref ON net_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_model_calls_credential_ref ON model_calls(credential_ref);
CREATE INDEX IF NOT EXISTS idx_fs_events_credential_ref ON fs_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_exec_events_credential_ref ON exec_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_tool_responses_credential_ref ON tool_responses(credential_ref);
CREATE INDEX IF NOT EXISTS idx_dns_events_credential_ref ON dns_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_audit_events_credential_ref ON audit_events(credential_ref);
CREATE INDEX IF NOT EXISTS idx_net_events_trace_id ON net_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_fs_events_trace_id ON fs_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_tool_calls_trace_id ON tool_calls(trace_id);
CREATE INDEX IF NOT EXISTS idx_tool_responses_trace_id ON tool_responses(trace_id);
CREATE INDEX IF NOT EXISTS idx_audit_events_trace_id ON audit_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_net_events_event_id ON net_events(event_id);
CREATE INDEX IF NOT EXISTS idx_model_calls_event_id ON model_calls(event_id);
CREATE INDEX IF NOT EXISTS idx_fs_events_event_id ON fs_events(event_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_event_id ON exec_events(event_id);
CREATE INDEX IF NOT EXISTS idx_dns_events_event_id ON dns_events(event_id);
CREATE INDEX IF NOT EXISTS idx_audit_events_event_id ON audit_events(event_id);
CREATE INDEX IF NOT EXISTS idx_substitution_events_event_id ON substitution_events(event_id);
"""

SESSION_SQL: str = TRAFFIC_SQL + GUEST_SQL + SECURITY_SQL + CROSS_TABLE_INDEX_SQL

# The transport ledger is its own batch: it is created only on a ledger that has never had
# the marker table, so a file that lost it is refused instead of quietly recreated empty.
TRANSPORT_SQL: str = f"""
CREATE TABLE IF NOT EXISTS transport_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE CHECK ({HEX12.format(c='event_id')}),
    timestamp_unix_ms INTEGER NOT NULL CHECK (timestamp_unix_ms >= 0),
    event_type TEXT NOT NULL CHECK (event_type IN {one_of(TRANSPORT_EVENT_TYPES)}),
    network_id TEXT,
    connection_id TEXT,
    event_json TEXT NOT NULL CHECK (json_valid(event_json)
        AND length(CAST(event_json AS BLOB)) <= {TRANSPORT_EVENT_JSON_MAX_BYTES})
);

CREATE INDEX IF NOT EXISTS idx_transport_events_network ON transport_events(network_id, id);
CREATE INDEX IF NOT EXISTS idx_transport_events_connection ON transport_events(connection_id, id);
CREATE INDEX IF NOT EXISTS idx_transport_events_timestamp ON transport_events(timestamp_unix_ms, id);

CREATE TABLE IF NOT EXISTS transport_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);

INSERT OR IGNORE INTO transport_schema(id, version) VALUES (1, {TRANSPORT_SCHEMA_VERSION});
"""

SCHEMA_SQL: str = SESSION_SQL + TRANSPORT_SQL

TABLES: tuple[str, ...] = (
    "net_events", "model_calls", "body_blocks", "event_body_blobs", "tool_calls",
    "tool_responses", "model_items", "fs_events", "exec_events", "dns_events", "audit_events",
    "substitution_events", "security_rule_events", "security_decision_events",
    "security_ask_events", "profile_mutation_events", "transport_events", "transport_schema",
)
SESSION_TABLES: tuple[str, ...] = TABLES[:16]
TRANSPORT_TABLES: tuple[str, ...] = TABLES[16:]


def statements(batch: str) -> tuple[str, ...]:
    """The statements of one DDL batch, in order."""
    # No statement in the DDL holds a ';' inside a literal, so ';' at a line end splits it.
    return tuple(s.strip() for s in re.split(r";\s*\n", batch) if s.strip())
