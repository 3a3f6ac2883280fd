"""The v2 DDL of the traffic tables: network requests, model calls, the body archive's index,
tool calls and responses, and model items (reference sections 3.1-3.7).

Transcribed from the v2-era reference (Capsem ``ddl.rs`` at 843715b) in Capsem's creation
order, with the indexes where Capsem creates them; :mod:`capsem_core.schema.tables` joins
this batch with the others into one script.
"""

from __future__ import annotations

from capsem_core.schema.columns import BLAKE3, CREDENTIAL_REF, EVENT_ID, EVENT_ID_SUPPLIED, one_of
from capsem_core.schema.vocabulary import (
    BODY_DIRECTIONS, BODY_EVENT_TYPES, BODY_SOURCE_TABLES, MODEL_ITEM_KINDS, MODEL_PROTOCOLS,
    TOOL_CALL_STATUSES, TOOL_TRANSPORTS,
)

TRAFFIC_SQL: str = f"""
CREATE TABLE IF NOT EXISTS net_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
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
    {CREDENTIAL_REF}
);

CREATE TABLE IF NOT EXISTS model_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
    timestamp TEXT NOT NULL,
    provider TEXT NOT NULL,
    protocol TEXT CHECK (protocol IS NULL OR protocol IN {one_of(MODEL_PROTOCOLS)}),
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
    {CREDENTIAL_REF}
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
    {EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {one_of(BODY_EVENT_TYPES)}),
    source_table TEXT NOT NULL CHECK (source_table IN {one_of(BODY_SOURCE_TABLES)}),
    direction TEXT NOT NULL CHECK (direction IN {one_of(BODY_DIRECTIONS)}),
    content_type TEXT,
    original_bytes INTEGER NOT NULL CHECK (original_bytes >= 0),
    stored_bytes INTEGER NOT NULL CHECK (stored_bytes >= 0 AND stored_bytes <= original_bytes),
    truncated INTEGER NOT NULL CHECK (truncated IN (0, 1)),
    body_hash TEXT NOT NULL CHECK ({BLAKE3.format(c='body_hash')}),
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
    {EVENT_ID},
    timestamp TEXT NOT NULL DEFAULT '',
    model_call_id INTEGER,
    provider TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'observed' CHECK (status IN {one_of(TOOL_CALL_STATUSES)}),
    call_index INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    arguments TEXT,
    response_preview TEXT,
    origin TEXT NOT NULL DEFAULT 'native',
    transport TEXT NOT NULL DEFAULT 'unknown' CHECK (transport IN {one_of(TOOL_TRANSPORTS)}),
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
    {CREDENTIAL_REF}
);

CREATE TABLE IF NOT EXISTS tool_responses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
    model_call_id INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    content_preview TEXT,
    is_error INTEGER DEFAULT 0,
    trace_id TEXT,
    turn_id TEXT,
    {CREDENTIAL_REF}
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
    {EVENT_ID},
    model_call_id INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT,
    path TEXT NOT NULL,
    trace_id TEXT,
    turn_id TEXT,
    kind TEXT NOT NULL CHECK (kind IN {one_of(MODEL_ITEM_KINDS)}),
    item_index INTEGER NOT NULL,
    call_id TEXT NOT NULL DEFAULT '',
    tool_name TEXT,
    arguments TEXT,
    content TEXT,
    content_hash TEXT NOT NULL CHECK ({BLAKE3.format(c='content_hash')}),
    {CREDENTIAL_REF},
    UNIQUE (trace_id, kind, content_hash, call_id)
);

CREATE INDEX IF NOT EXISTS idx_model_items_trace_id ON model_items(trace_id);
CREATE INDEX IF NOT EXISTS idx_model_items_call_id ON model_items(call_id);
CREATE INDEX IF NOT EXISTS idx_model_items_provider_path_model ON model_items(provider, path, model);
CREATE INDEX IF NOT EXISTS idx_tool_calls_call_id ON tool_calls(call_id);
CREATE INDEX IF NOT EXISTS idx_tool_responses_call_id ON tool_responses(call_id);
"""
