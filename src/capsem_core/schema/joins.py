"""How the session tables join: the tables the identity graph's invariants read.

The specification's identity graph joins rows across tables: a turn's rows by ``trace_id`` and
``turn_id``, a security row back to the row it judges by ``event_id`` (which table depends on
the security event's type). Both the SQL of those invariants (``check/identity.py``) and
their reading from session.db's own pages (``pages/graph.py``) take the tables from here.
"""

from __future__ import annotations

from capsem_core.schema.create import table_columns
from capsem_core.schema.tables import SESSION_TABLES
from capsem_core.schema.vocabulary import SECURITY_TABLES, TRANSPORT_EVENT_TYPES

# The tables that carry both trace_id and turn_id: a turn must name one trace in all of them.
# Each has an index idx_<table>_turn_id.
TURN_TABLES: tuple[str, ...] = tuple(
    t for t in SESSION_TABLES if {"trace_id", "turn_id"} <= set(table_columns(t)))

# The row a security event_type names, joined by event_id. Every target but tool_calls has an
# event_id index (idx_<table>_event_id; transport_events' UNIQUE autoindex). security.rule and
# security.ask name security rows themselves (a rule match on a rule match, a decision on an
# ask).
EVENT_TABLES: dict[str, str] = {
    "http.request": "net_events",
    "model.call": "model_calls",
    "mcp.tool_call": "tool_calls",
    "dns.query": "dns_events",
    "file.event": "fs_events",
    "file.import": "fs_events",
    "file.export": "fs_events",
    "process.exec": "exec_events",
    "process.exec_complete": "exec_events",
    "process.audit": "audit_events",
    "credential.substitution": "substitution_events",
    "security.rule": "security_rule_events",
    "security.ask": "security_ask_events",
    **{t: "transport_events" for t in TRANSPORT_EVENT_TYPES},
}
# MCP protocol facts with no row of their own: the security payload is their evidence.
EXEMPT_EVENT_TYPES: tuple[str, ...] = ("mcp.tool_list", "mcp.event")

__all__ = ["EVENT_TABLES", "EXEMPT_EVENT_TYPES", "SECURITY_TABLES", "TURN_TABLES"]
