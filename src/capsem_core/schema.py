"""The ``session.db`` schema of the archive-format-v2 era, and the check that refuses any other.

This module owns:

* the DDL of every table a v2-era Capsem session ledger holds (16 session tables plus the
  transport ledger ``transport_events`` / ``transport_schema``), with every column, default,
  CHECK, UNIQUE, the one foreign key and all 91 declared indexes, in Capsem's creation order;
* the vocabularies those CHECKs enforce (event types, source tables, directions);
* ``create_schema`` (idempotent, one transaction) and ``table_columns`` (DDL column order,
  which the writer uses to build INSERTs);
* ``check_schema`` — "no migrations": a ledger written by an older or newer build is refused
  with a message naming what does not match, never upgraded;
* ``ReadyCheck`` — the cheap readiness probe: a shape check re-run only when SQLite's
  ``schema_version`` cookie moves, so it costs the same on any ledger size.

The DDL is transcribed from the v2-era reference (Capsem ``ddl.rs`` at 843715b); the
catalog it produces is locked by ``tests/golden/schema_v2_catalog.json``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from functools import lru_cache
from typing import Iterable

from capsem_core.errors import LedgerError, SchemaMismatch

# --- vocabularies -------------------------------------------------------------------------

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


def _one_of(values: Iterable[str]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# --- DDL ----------------------------------------------------------------------------------

# Repeated column shapes. An event id is 6 random bytes as 12 lowercase hex digits; the
# NOT GLOB test rejects any character outside 0-9a-f, so every one of the 12 is checked.
_HEX12 = "length({c}) = 12 AND {c} NOT GLOB '*[^0-9a-f]*'"
_EVENT_ID = f"event_id TEXT NOT NULL DEFAULT (lower(hex(randomblob(6)))) CHECK ({_HEX12.format(c='event_id')})"
_EVENT_ID_SUPPLIED = f"event_id TEXT NOT NULL CHECK ({_HEX12.format(c='event_id')})"
# Hash-shaped text: exact length, prefix, first digit lowercase hex (GLOB ends in '*').
_BLAKE3 = "length({c}) = 71 AND {c} GLOB 'blake3:[0-9a-f]*'"
_CREDENTIAL_REF = ("credential_ref TEXT CHECK (credential_ref IS NULL OR "
                   "(length(credential_ref) = 82 AND credential_ref GLOB 'credential:blake3:[0-9a-f]*'))")

SESSION_SQL: str = f"""
CREATE TABLE IF NOT EXISTS net_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    domain TEXT NOT NULL,
    port INTEGER DEFAULT 443,
    decision TEXT NOT NULL,
    process_name TEXT,
    pid INTEGER,
    method TEXT,
    path TEXT,
    query TEXT,
    status_code INTEGER,
    bytes_sent INTEGER DEFAULT 0,
    bytes_received INTEGER DEFAULT 0,
    duration_ms INTEGER DEFAULT 0,
    matched_rule TEXT,
    request_headers TEXT,
    response_headers TEXT,
    headers_truncated INTEGER NOT NULL DEFAULT 0 CHECK (headers_truncated IN (0, 1)),
    request_body_preview TEXT,
    response_body_preview TEXT,
    conn_type TEXT DEFAULT 'https',
    policy_mode TEXT,
    policy_action TEXT,
    policy_rule TEXT,
    policy_reason TEXT,
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE TABLE IF NOT EXISTS model_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    provider TEXT NOT NULL,
    protocol TEXT CHECK (protocol IS NULL OR protocol IN {_one_of(MODEL_PROTOCOLS)}),
    model TEXT,
    process_name TEXT,
    pid INTEGER,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    stream INTEGER DEFAULT 0,
    system_prompt_preview TEXT,
    messages_count INTEGER DEFAULT 0,
    tools_count INTEGER DEFAULT 0,
    request_bytes INTEGER DEFAULT 0,
    request_body_preview TEXT,
    message_id TEXT,
    status_code INTEGER,
    text_content TEXT,
    thinking_content TEXT,
    stop_reason TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    duration_ms INTEGER DEFAULT 0,
    response_bytes INTEGER DEFAULT 0,
    estimated_cost_usd REAL DEFAULT 0,
    trace_id TEXT,
    turn_id TEXT,
    usage_details TEXT,
    {_CREDENTIAL_REF}
);

CREATE TABLE IF NOT EXISTS body_blocks (
    block_offset INTEGER PRIMARY KEY,
    raw_len INTEGER NOT NULL CHECK (raw_len > 0),
    disk_len INTEGER NOT NULL CHECK (disk_len > 0),
    sealed_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS idx_body_blocks_sealed_at ON body_blocks(sealed_at);

CREATE TABLE IF NOT EXISTS event_body_blobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {_one_of(BODY_EVENT_TYPES)}),
    source_table TEXT NOT NULL CHECK (source_table IN {_one_of(BODY_SOURCE_TABLES)}),
    direction TEXT NOT NULL CHECK (direction IN {_one_of(BODY_DIRECTIONS)}),
    content_type TEXT,
    original_bytes INTEGER NOT NULL CHECK (original_bytes >= 0),
    stored_bytes INTEGER NOT NULL CHECK (stored_bytes >= 0 AND stored_bytes <= original_bytes),
    truncated INTEGER NOT NULL CHECK (truncated IN (0, 1)),
    body_hash TEXT NOT NULL CHECK ({_BLAKE3.format(c='body_hash')}),
    block_offset INTEGER NOT NULL REFERENCES body_blocks(block_offset),
    body_offset INTEGER NOT NULL CHECK (body_offset >= 0),
    body_len INTEGER NOT NULL CHECK (body_len = stored_bytes),
    trace_id TEXT,
    turn_id TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (event_id, source_table, direction)
);

CREATE INDEX IF NOT EXISTS idx_event_body_blobs_event_id ON event_body_blobs(event_id);
CREATE INDEX IF NOT EXISTS idx_event_body_blobs_trace_id ON event_body_blobs(trace_id);
CREATE INDEX IF NOT EXISTS idx_event_body_blobs_hash ON event_body_blobs(body_hash);
CREATE INDEX IF NOT EXISTS idx_event_body_blobs_block ON event_body_blobs(block_offset);

CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL DEFAULT '',
    model_call_id INTEGER,
    provider TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'observed' CHECK (status IN {_one_of(TOOL_CALL_STATUSES)}),
    call_index INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    arguments TEXT,
    response_preview TEXT,
    origin TEXT NOT NULL DEFAULT 'native',
    transport TEXT NOT NULL DEFAULT 'unknown' CHECK (transport IN {_one_of(TOOL_TRANSPORTS)}),
    server_name TEXT,
    method TEXT,
    request_id TEXT,
    decision TEXT NOT NULL DEFAULT 'allowed',
    duration_ms INTEGER DEFAULT 0,
    error_message TEXT,
    process_name TEXT,
    bytes_sent INTEGER DEFAULT 0,
    bytes_received INTEGER DEFAULT 0,
    policy_mode TEXT,
    policy_action TEXT,
    policy_rule TEXT,
    policy_reason TEXT,
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE TABLE IF NOT EXISTS tool_responses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    model_call_id INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    content_preview TEXT,
    is_error INTEGER DEFAULT 0,
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_net_events_domain ON net_events(domain);
CREATE INDEX IF NOT EXISTS idx_net_events_timestamp ON net_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_model_calls_provider_ts ON model_calls(provider, timestamp);
CREATE INDEX IF NOT EXISTS idx_tool_calls_model_call ON tool_calls(model_call_id);
CREATE INDEX IF NOT EXISTS idx_tool_responses_model_call ON tool_responses(model_call_id);
CREATE INDEX IF NOT EXISTS idx_model_calls_trace_id ON model_calls(trace_id);
CREATE INDEX IF NOT EXISTS idx_net_events_decision_bytes ON net_events(decision, bytes_sent, bytes_received);
CREATE INDEX IF NOT EXISTS idx_model_calls_usage_totals
    ON model_calls(input_tokens, output_tokens, duration_ms, estimated_cost_usd);
CREATE INDEX IF NOT EXISTS idx_model_calls_usage_details
    ON model_calls(usage_details) WHERE usage_details IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_tool_calls_origin ON tool_calls(origin);

CREATE TABLE IF NOT EXISTS model_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    model_call_id INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT,
    path TEXT NOT NULL,
    trace_id TEXT,
    turn_id TEXT,
    kind TEXT NOT NULL CHECK (kind IN {_one_of(MODEL_ITEM_KINDS)}),
    item_index INTEGER NOT NULL,
    call_id TEXT NOT NULL DEFAULT '',
    tool_name TEXT,
    arguments TEXT,
    content TEXT,
    content_hash TEXT NOT NULL CHECK ({_BLAKE3.format(c='content_hash')}),
    {_CREDENTIAL_REF},
    UNIQUE (trace_id, kind, content_hash, call_id)
);

CREATE INDEX IF NOT EXISTS idx_model_items_trace_id ON model_items(trace_id);
CREATE INDEX IF NOT EXISTS idx_model_items_call_id ON model_items(call_id);
CREATE INDEX IF NOT EXISTS idx_model_items_provider_path_model ON model_items(provider, path, model);
CREATE INDEX IF NOT EXISTS idx_tool_calls_call_id ON tool_calls(call_id);
CREATE INDEX IF NOT EXISTS idx_tool_responses_call_id ON tool_responses(call_id);

CREATE TABLE IF NOT EXISTS fs_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    action TEXT NOT NULL,
    path TEXT NOT NULL,
    directory TEXT,
    name TEXT,
    size INTEGER,
    kind TEXT NOT NULL DEFAULT 'file' CHECK (kind IN {_one_of(FS_KINDS)}),
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_fs_events_timestamp ON fs_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_fs_events_path ON fs_events(path);

CREATE TABLE IF NOT EXISTS exec_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    exec_id INTEGER NOT NULL,
    command TEXT NOT NULL,
    exit_code INTEGER,
    duration_ms INTEGER,
    stdout_preview TEXT,
    stderr_preview TEXT,
    stdout_bytes INTEGER DEFAULT 0,
    stderr_bytes INTEGER DEFAULT 0,
    source TEXT NOT NULL DEFAULT 'api',
    trace_id TEXT,
    turn_id TEXT,
    process_name TEXT,
    pid INTEGER,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_exec_events_timestamp ON exec_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_exec_events_exec_id ON exec_events(exec_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_trace_id ON exec_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_source ON exec_events(source);

CREATE TABLE IF NOT EXISTS dns_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    qname TEXT NOT NULL,
    qtype INTEGER NOT NULL,
    qclass INTEGER NOT NULL,
    rcode INTEGER NOT NULL,
    answer_ip TEXT,
    decision TEXT NOT NULL,
    matched_rule TEXT,
    source_proto TEXT,
    process_name TEXT,
    upstream_resolver_ms INTEGER DEFAULT 0,
    trace_id TEXT,
    turn_id TEXT,
    policy_mode TEXT,
    policy_action TEXT,
    policy_rule TEXT,
    policy_reason TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_dns_events_timestamp ON dns_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_dns_events_qname ON dns_events(qname);
CREATE INDEX IF NOT EXISTS idx_dns_events_trace_id ON dns_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_dns_events_decision ON dns_events(decision);
CREATE INDEX IF NOT EXISTS idx_dns_events_policy_rule ON dns_events(policy_rule);

CREATE TABLE IF NOT EXISTS audit_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    pid INTEGER NOT NULL,
    ppid INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    exe TEXT NOT NULL,
    comm TEXT,
    argv TEXT NOT NULL,
    cwd TEXT,
    exit_code INTEGER,
    session_id INTEGER,
    tty TEXT,
    audit_id TEXT,
    exec_event_id INTEGER,
    parent_exe TEXT,
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_audit_events_timestamp ON audit_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_audit_events_exe ON audit_events(exe);
CREATE INDEX IF NOT EXISTS idx_audit_events_pid ON audit_events(pid);
CREATE INDEX IF NOT EXISTS idx_audit_events_ppid ON audit_events(ppid);

CREATE TABLE IF NOT EXISTS substitution_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {_EVENT_ID},
    timestamp TEXT NOT NULL,
    material_class TEXT NOT NULL,
    source TEXT NOT NULL,
    event_type TEXT,
    algorithm TEXT NOT NULL,
    substitution_ref TEXT NOT NULL CHECK (length(substitution_ref) = 82
        AND substitution_ref GLOB 'credential:blake3:[0-9a-f]*'),
    outcome TEXT NOT NULL CHECK (outcome IN {_one_of(SUBSTITUTION_OUTCOMES)}),
    provider TEXT,
    confidence REAL,
    trace_id TEXT,
    turn_id TEXT,
    context_json TEXT
);

CREATE INDEX IF NOT EXISTS idx_substitution_events_timestamp ON substitution_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_substitution_events_ref ON substitution_events(substitution_ref);
CREATE INDEX IF NOT EXISTS idx_substitution_events_material ON substitution_events(material_class);

CREATE TABLE IF NOT EXISTS security_rule_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    {_EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {_one_of(SECURITY_EVENT_TYPES)}),
    rule_id TEXT NOT NULL,
    rule_action TEXT NOT NULL CHECK (rule_action IN {_one_of(RULE_ACTIONS)}),
    detection_level TEXT NOT NULL DEFAULT 'none' CHECK (detection_level IN {_one_of(DETECTION_LEVELS)}),
    rule_json TEXT NOT NULL CHECK (json_valid(rule_json)),
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_security_rule_events_timestamp ON security_rule_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_event_id ON security_rule_events(event_id);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_rule_id ON security_rule_events(rule_id);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_event_type ON security_rule_events(event_type);
CREATE INDEX IF NOT EXISTS idx_security_rule_events_rule_stats
    ON security_rule_events(rule_action, detection_level, rule_id, timestamp_unix_ms, id, event_id);

CREATE TABLE IF NOT EXISTS security_decision_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    {_EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {_one_of(SECURITY_EVENT_TYPES)}),
    stage TEXT NOT NULL CHECK (stage IN {_one_of(DECISION_STAGES)}),
    actor TEXT NOT NULL,
    rule_id TEXT,
    plugin_id TEXT,
    previous_decision TEXT NOT NULL CHECK (previous_decision IN {_one_of(DECISIONS)}),
    requested_decision TEXT NOT NULL CHECK (requested_decision IN {_one_of(DECISIONS)}),
    effective_decision TEXT NOT NULL CHECK (effective_decision IN {_one_of(DECISIONS)}),
    reason TEXT,
    trace_id TEXT,
    turn_id TEXT,
    {_CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_security_decision_events_timestamp ON security_decision_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_event_id ON security_decision_events(event_id);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_actor ON security_decision_events(actor);

CREATE TABLE IF NOT EXISTS security_ask_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    ask_id TEXT NOT NULL CHECK ({_HEX12.format(c='ask_id')}),
    {_EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {_one_of(SECURITY_EVENT_TYPES)}),
    rule_id TEXT NOT NULL,
    rule_name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {_one_of(ASK_STATUSES)}),
    rule_json TEXT NOT NULL CHECK (json_valid(rule_json)),
    resolver TEXT,
    reason TEXT,
    trace_id TEXT,
    turn_id TEXT
);

CREATE INDEX IF NOT EXISTS idx_security_ask_events_timestamp ON security_ask_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_security_ask_events_ask_id ON security_ask_events(ask_id);
CREATE INDEX IF NOT EXISTS idx_security_ask_events_event_id ON security_ask_events(event_id);
CREATE INDEX IF NOT EXISTS idx_security_ask_events_rule_id ON security_ask_events(rule_id);

CREATE TABLE IF NOT EXISTS profile_mutation_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    mutation_id TEXT NOT NULL CHECK ({_HEX12.format(c='mutation_id')}),
    profile_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    category TEXT NOT NULL,
    filename TEXT NOT NULL,
    affected_path TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    rule_id TEXT,
    old_hash TEXT NOT NULL CHECK ({_BLAKE3.format(c='old_hash')}),
    old_size INTEGER NOT NULL,
    new_hash TEXT NOT NULL CHECK ({_BLAKE3.format(c='new_hash')}),
    new_size INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN {_one_of(MUTATION_STATUSES)}),
    error TEXT,
    trace_id TEXT
);

CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_timestamp ON profile_mutation_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_profile ON profile_mutation_events(profile_id);
CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_target
    ON profile_mutation_events(category, target_kind, target_key);

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

# The transport ledger is its own batch: it is created only on a ledger that has never had
# the marker table, so a file that lost it is refused instead of quietly recreated empty.
TRANSPORT_SQL: str = f"""
CREATE TABLE IF NOT EXISTS transport_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE CHECK ({_HEX12.format(c='event_id')}),
    timestamp_unix_ms INTEGER NOT NULL CHECK (timestamp_unix_ms >= 0),
    event_type TEXT NOT NULL CHECK (event_type IN {_one_of(TRANSPORT_EVENT_TYPES)}),
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


def _statements(batch: str) -> tuple[str, ...]:
    # No statement in the DDL holds a ';' inside a literal, so ';' at a line end splits it.
    return tuple(s.strip() for s in re.split(r";\s*\n", batch) if s.strip())


_SESSION_STATEMENTS = _statements(SESSION_SQL)
_TRANSPORT_STATEMENTS = _statements(TRANSPORT_SQL)


# --- create --------------------------------------------------------------------------------

def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def create_schema(conn: sqlite3.Connection, path: os.PathLike[str] | str | None = None) -> None:
    """Apply the v2 DDL to ``conn`` in one transaction; re-running it changes nothing.

    The transport batch runs only when ``transport_schema`` is absent, and then only on a
    ledger whose session tables hold no rows: a ledger with rows but no transport ledger has
    lost it, and recreating it empty would hide that. This does not vouch for tables that
    already existed with another shape; call ``check_schema`` after it.
    """
    nested = conn.in_transaction
    if nested:
        conn.execute("SAVEPOINT capsem_create_schema")
    else:
        # IMMEDIATE: two writers opening one new ledger must not both decide it is empty.
        conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SESSION_STATEMENTS:
            conn.execute(statement)
        if "transport_schema" not in _table_names(conn):
            for table in SESSION_TABLES:
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    raise SchemaMismatch(
                        f"session ledger has rows in {table} but no transport ledger "
                        "(transport_schema is missing): refusing to recreate transport_events empty",
                        path)
            for statement in _TRANSPORT_STATEMENTS:
                conn.execute(statement)
    except BaseException:
        if nested:
            conn.execute("ROLLBACK TO capsem_create_schema")
            conn.execute("RELEASE capsem_create_schema")
        else:
            conn.execute("ROLLBACK")
        raise
    if nested:
        conn.execute("RELEASE capsem_create_schema")
    else:
        conn.execute("COMMIT")


@lru_cache(maxsize=1)
def _reference_columns() -> dict[str, tuple[str, ...]]:
    """Every table's column names in DDL order, read back from an in-memory database."""
    from capsem_core import db

    mem = db.connect_memory()
    try:
        mem.executescript(SCHEMA_SQL)
        return {t: tuple(r[1] for r in mem.execute(f"PRAGMA table_xinfo({t})")) for t in TABLES}
    finally:
        mem.close()


def table_columns(table: str) -> tuple[str, ...]:
    """The columns of ``table`` in DDL order (``id`` first where the table has one)."""
    try:
        return _reference_columns()[table]
    except KeyError:
        raise KeyError(f"{table!r} is not a session.db table of this build") from None


# --- check: "no migrations" ----------------------------------------------------------------

def required_columns(table: str) -> tuple[str, ...]:
    """Columns ``table`` must have for this build to read and write it: all of its v2 columns.

    This covers the reference's required-columns lists (body tables, transport_events) and
    every column the doctor, the reader and the writer touch. Extra columns are tolerated.
    """
    return table_columns(table)


# A security table's event_type list, however Capsem spelled the CHECK (quoted names, case).
_EVENT_TYPE_IN = re.compile(r"""["`\[]?\bevent_type["`\]]?\s+IN\s*\(([^)]*)\)""", re.IGNORECASE)
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")


def _event_type_list(table_sql: str) -> tuple[str, ...] | None:
    match = _EVENT_TYPE_IN.search(table_sql)
    if match is None:
        return None
    return tuple(v.replace("''", "'") for v in _SQL_STRING.findall(match.group(1)))


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def _security_problems(table: str, sql: str, columns: set[str]) -> list[str]:
    problems: list[str] = []
    if "event_json" in columns:
        problems.append(f"{table} keeps its payload inline in event_json, which this build archives "
                        "in session.bodies (written by an older build)")
    listed = _event_type_list(sql)
    if listed is None:
        problems.append(f"{table} does not constrain event_type to a list (written by an older build)")
    elif set(listed) != set(SECURITY_EVENT_TYPES):
        missing = set(SECURITY_EVENT_TYPES) - set(listed)
        extra = set(listed) - set(SECURITY_EVENT_TYPES)
        era = ("an older list" if not extra else "a newer list" if not missing else "a different list")
        detail = "; ".join(part for part in (
            f"lacks {_names(missing)}" if missing else "",
            f"adds {_names(extra)}" if extra else "") if part)
        problems.append(f"{table} constrains event_type to {era} than this build's ({detail})")
    return problems


def _read_catalog(conn: sqlite3.Connection) -> tuple[dict[str, tuple[str, set[str]]], int]:
    """(table -> (CREATE sql, column names)) for every table, and ``PRAGMA user_version``."""
    tables: dict[str, tuple[str, set[str]]] = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
        tables[name] = (sql or "", set())
    # One statement for every table's columns: the schema is small, the rows are not read.
    for table, column in conn.execute(
            "SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table'"):
        tables[table][1].add(column)
    user_version = conn.execute("PRAGMA user_version").fetchone()[0]
    return tables, int(user_version)


def _version_problem(conn: sqlite3.Connection) -> str | None:
    """What is wrong with the transport marker row, if anything (one rowid lookup)."""
    row = conn.execute("SELECT version FROM transport_schema WHERE id = 1").fetchone()
    if row is None:
        return "transport_schema exists but carries no version row: the ledger was torn mid-stamp"
    version = row[0]
    if version == TRANSPORT_SCHEMA_VERSION and isinstance(version, int):
        return None
    if isinstance(version, int) and version > TRANSPORT_SCHEMA_VERSION:
        return (f"written by a newer build: unsupported transport schema version {version} "
                f"(this build knows {TRANSPORT_SCHEMA_VERSION})")
    return f"unsupported transport schema version {version!r} (this build knows {TRANSPORT_SCHEMA_VERSION})"


def _shape_problems(conn: sqlite3.Connection) -> list[str]:
    tables, user_version = _read_catalog(conn)
    if not tables:
        return ["empty database: it holds no tables at all, so it is not a session ledger"]
    known = [t for t in TABLES if t in tables]
    later = [t for t in LATER_ERA_TABLES if t in tables]
    if not known and not later:
        return [f"not a Capsem session ledger: it holds none of the session tables "
                f"(found {_names(list(tables)[:8])})"]

    problems: list[str] = []
    if later:
        problems.append(f"written by a newer build (archive format v3 or later): it has "
                        f"{_names(later)}, which this v2-era build does not know")
    if user_version != 0:
        problems.append(f"written by a newer build: PRAGMA user_version is {user_version}, "
                        "which v2-era session ledgers leave at 0")
    if "event_body_blobs" in tables and "body" in tables["event_body_blobs"][1]:
        problems.append("event_body_blobs keeps body bytes inline in a body column "
                        "(a v1-era ledger from before the session.bodies archive)")
    if "transport_schema" not in tables:
        problems.append("session ledger predates the transport ledger: transport_schema is missing")
    else:
        version_problem = _version_problem(conn)
        if version_problem is not None:
            problems.append(version_problem)
    missing_tables = [t for t in TABLES if t not in tables and t != "transport_schema"]
    if missing_tables:
        word = "table" if len(missing_tables) == 1 else "tables"
        problems.append(f"missing {word} {', '.join(missing_tables)}")
    for table in known:
        sql, columns = tables[table]
        lacking = [c for c in required_columns(table) if c not in columns]
        if lacking:
            word = "column" if len(lacking) == 1 else "columns"
            problems.append(f"table {table} lacks {word} {', '.join(lacking)}")
        if table in SECURITY_TABLES:
            problems.extend(_security_problems(table, sql, columns))
    return problems


def _wrap_sqlite_error(exc: sqlite3.DatabaseError, path: os.PathLike[str] | str | None) -> Exception:
    code = getattr(exc, "sqlite_errorname", "")
    if code in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(exc):
        return SchemaMismatch(f"not a SQLite session ledger ({exc})", path)
    return LedgerError(f"cannot read the session.db schema: {exc}", path)


def check_schema(conn: sqlite3.Connection, path: os.PathLike[str] | str | None) -> None:
    """Refuse a ``session.db`` this build did not write the shape of ("no migrations").

    Raises ``SchemaMismatch`` naming ``path`` and every mismatch found: missing tables or
    columns (older build), a missing transport ledger or version row, an unknown transport
    version, security tables with an older event_type list or an inline ``event_json``,
    an inline v1-era ``body`` column, or a later era's markers (``archive_state``, a set
    ``user_version``). Reads only the schema and the one marker row, never table pages.
    """
    try:
        problems = _shape_problems(conn)
    except sqlite3.DatabaseError as exc:
        raise _wrap_sqlite_error(exc, path) from exc
    if problems:
        raise SchemaMismatch("session.db does not have this build's v2 shape (no migrations): "
                             + "; ".join(problems), path)


class ReadyCheck:
    """Readiness of one open ``session.db``: its shape, re-checked only when the schema moves.

    ``ready()`` reads ``PRAGMA schema_version`` (a cookie in the database header, so O(1)
    whatever the ledger's size) and the transport marker row (one rowid lookup); the full
    shape check runs only when the cookie differs from the last successful check.
    ``full_checks`` counts how many full checks ran.
    """

    __slots__ = ("_conn", "path", "_checked_cookie", "full_checks")

    def __init__(self, conn: sqlite3.Connection, path: os.PathLike[str] | str | None) -> None:
        self._conn = conn
        self.path = path
        self._checked_cookie: int | None = None
        self.full_checks = 0

    def ready(self) -> None:
        """Return if the ledger has this build's shape; raise ``SchemaMismatch`` if not."""
        conn = self._conn
        try:
            cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
            if cookie == self._checked_cookie:
                # The shape is as checked; only the marker row can have changed under it.
                problem = _version_problem(conn)
                if problem is None:
                    return
                self._checked_cookie = None
                raise SchemaMismatch("session.db does not have this build's v2 shape "
                                     f"(no migrations): {problem}", self.path)
        except sqlite3.DatabaseError as exc:
            raise _wrap_sqlite_error(exc, self.path) from exc
        self.full_checks += 1
        check_schema(conn, self.path)
        self._checked_cookie = cookie
