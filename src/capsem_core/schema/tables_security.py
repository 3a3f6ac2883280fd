"""The v2 DDL of the security tables: rule, decision and ask events, and profile mutations
(reference sections 3.13-3.16).

Transcribed from the v2-era reference (Capsem ``ddl.rs`` at 843715b) in Capsem's creation
order, with the indexes where Capsem creates them. The three ``security_*`` tables constrain
``event_type`` to list B, which :mod:`capsem_core.schema.check` reads back to tell eras apart.
"""

from __future__ import annotations

from capsem_core.schema.columns import BLAKE3, CREDENTIAL_REF, EVENT_ID_SUPPLIED, HEX12, one_of
from capsem_core.schema.vocabulary import (
    ASK_STATUSES, DECISION_STAGES, DECISIONS, DETECTION_LEVELS, MUTATION_STATUSES, RULE_ACTIONS,
    SECURITY_EVENT_TYPES,
)

SECURITY_SQL: str = f"""
CREATE TABLE IF NOT EXISTS security_rule_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    {EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {one_of(SECURITY_EVENT_TYPES)}),
    rule_id TEXT NOT NULL,
    rule_action TEXT NOT NULL CHECK (rule_action IN {one_of(RULE_ACTIONS)}),
    detection_level TEXT NOT NULL DEFAULT 'none' CHECK (detection_level IN {one_of(DETECTION_LEVELS)}),
    rule_json TEXT NOT NULL CHECK (json_valid(rule_json)),
    trace_id TEXT,
    turn_id TEXT,
    {CREDENTIAL_REF}
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
    {EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {one_of(SECURITY_EVENT_TYPES)}),
    stage TEXT NOT NULL CHECK (stage IN {one_of(DECISION_STAGES)}),
    actor TEXT NOT NULL,
    rule_id TEXT,
    plugin_id TEXT,
    previous_decision TEXT NOT NULL CHECK (previous_decision IN {one_of(DECISIONS)}),
    requested_decision TEXT NOT NULL CHECK (requested_decision IN {one_of(DECISIONS)}),
    effective_decision TEXT NOT NULL CHECK (effective_decision IN {one_of(DECISIONS)}),
    reason TEXT,
    trace_id TEXT,
    turn_id TEXT,
    {CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_security_decision_events_timestamp ON security_decision_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_event_id ON security_decision_events(event_id);
CREATE INDEX IF NOT EXISTS idx_security_decision_events_actor ON security_decision_events(actor);

CREATE TABLE IF NOT EXISTS security_ask_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    timestamp_unix_ms INTEGER NOT NULL,
    ask_id TEXT NOT NULL CHECK ({HEX12.format(c='ask_id')}),
    {EVENT_ID_SUPPLIED},
    event_type TEXT NOT NULL CHECK (event_type IN {one_of(SECURITY_EVENT_TYPES)}),
    rule_id TEXT NOT NULL,
    rule_name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {one_of(ASK_STATUSES)}),
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
    mutation_id TEXT NOT NULL CHECK ({HEX12.format(c='mutation_id')}),
    profile_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    category TEXT NOT NULL,
    filename TEXT NOT NULL,
    affected_path TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    rule_id TEXT,
    old_hash TEXT NOT NULL CHECK ({BLAKE3.format(c='old_hash')}),
    old_size INTEGER NOT NULL,
    new_hash TEXT NOT NULL CHECK ({BLAKE3.format(c='new_hash')}),
    new_size INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN {one_of(MUTATION_STATUSES)}),
    error TEXT,
    trace_id TEXT
);

CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_timestamp ON profile_mutation_events(timestamp_unix_ms);
CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_profile ON profile_mutation_events(profile_id);
CREATE INDEX IF NOT EXISTS idx_profile_mutation_events_target
    ON profile_mutation_events(category, target_kind, target_key);
"""
