"""The vocabularies the v2 schema's CHECKs enforce: event types, source tables, directions and
every other closed list a column may hold, with the transport ledger's version and bound.

The DDL modules spell these into their CHECK constraints; the shape check compares a ledger's
security tables against list B; the writer and the sample generator draw their values here.
"""

from __future__ import annotations


# List A: what an archived body can belong to.
BODY_EVENT_TYPES: tuple[str, ...] = (
    "http.request", "model.call", "mcp.tool_call", "mcp.tool_list", "mcp.event", "dns.query",
    "file.event", "file.import", "file.export", "process.exec", "process.exec_complete",
    "process.audit", "credential.substitution", "security.rule", "security.decision",
    "security.ask",
)

# List C: the transport ledger's events (exactly the network part of list B).
TRANSPORT_EVENT_TYPES: tuple[str, ...] = (
    "network.connect", "network.connect_result", "network.close", "network.lifecycle",
    "network.probe", "network.probe_result",
)

# List B: what a security rule, decision or ask can concern. Unlike list A it has no
# ``security.decision`` (a decision is never the subject of a decision) and has the
# network events.
SECURITY_EVENT_TYPES: tuple[str, ...] = (
    "http.request", "model.call", "mcp.tool_call", "mcp.tool_list", "mcp.event", "dns.query",
    "file.event", "file.import", "file.export", "process.exec", "process.exec_complete",
    "process.audit", "credential.substitution", "security.rule", "security.ask",
) + TRANSPORT_EVENT_TYPES

BODY_SOURCE_TABLES: tuple[str, ...] = (
    "net_events", "model_calls", "tool_calls", "tool_responses", "exec_events",
    "security_rule_events", "security_decision_events", "security_ask_events",
)

BODY_DIRECTIONS: tuple[str, ...] = ("request", "response", "payload", "stdout", "stderr")

# The tables whose ``event_type`` is constrained to list B and whose payload is archived.
SECURITY_TABLES: tuple[str, ...] = (
    "security_rule_events", "security_decision_events", "security_ask_events",
)

MODEL_PROTOCOLS: tuple[str, ...] = ("anthropic", "openai", "google", "ollama")
TOOL_CALL_STATUSES: tuple[str, ...] = ("requested", "observed", "responded", "error")
TOOL_TRANSPORTS: tuple[str, ...] = ("http", "sse", "websocket", "vsock_frame", "direct", "unknown")
MODEL_ITEM_KINDS: tuple[str, ...] = ("request", "reasoning", "response", "tool_call", "tool_response")
FS_KINDS: tuple[str, ...] = ("file", "dir", "symlink", "other")
SUBSTITUTION_OUTCOMES: tuple[str, ...] = ("captured", "brokered", "injected", "error")
RULE_ACTIONS: tuple[str, ...] = ("allow", "ask", "block", "preprocess", "rewrite", "postprocess")
DETECTION_LEVELS: tuple[str, ...] = ("none", "informational", "low", "medium", "high", "critical")
DECISION_STAGES: tuple[str, ...] = ("preprocess", "rule", "rewrite", "postprocess", "ask_resolution")
DECISIONS: tuple[str, ...] = ("allow", "ask", "block")
ASK_STATUSES: tuple[str, ...] = ("pending", "approved", "denied")
MUTATION_STATUSES: tuple[str, ...] = ("applied", "failed")

TRANSPORT_SCHEMA_VERSION = 1
TRANSPORT_EVENT_JSON_MAX_BYTES = 65536

# Tables present only in ledgers of a later era (archive format v3+).
LATER_ERA_TABLES: tuple[str, ...] = ("archive_state",)

