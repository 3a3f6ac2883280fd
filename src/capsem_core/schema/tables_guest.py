"""The v2 DDL of what the guest does: file events, process execs, DNS lookups, audit records
and credential substitutions (reference sections 3.8-3.12).

Transcribed from the v2-era reference (Capsem ``ddl.rs`` at 843715b) in Capsem's creation
order, with the indexes where Capsem creates them.
"""

from __future__ import annotations

from capsem_core.schema.columns import CREDENTIAL_REF, EVENT_ID, one_of
from capsem_core.schema.vocabulary import FS_KINDS, SUBSTITUTION_OUTCOMES

GUEST_SQL: str = f"""
CREATE TABLE IF NOT EXISTS fs_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
    timestamp TEXT NOT NULL,
    action TEXT NOT NULL,
    path TEXT NOT NULL,
    directory TEXT,
    name TEXT,
    size INTEGER,
    kind TEXT NOT NULL DEFAULT 'file' CHECK (kind IN {one_of(FS_KINDS)}),
    trace_id TEXT,
    turn_id TEXT,
    {CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_fs_events_timestamp ON fs_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_fs_events_path ON fs_events(path);

CREATE TABLE IF NOT EXISTS exec_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
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
    {CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_exec_events_timestamp ON exec_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_exec_events_exec_id ON exec_events(exec_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_trace_id ON exec_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_exec_events_source ON exec_events(source);

CREATE TABLE IF NOT EXISTS dns_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
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
    {CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_dns_events_timestamp ON dns_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_dns_events_qname ON dns_events(qname);
CREATE INDEX IF NOT EXISTS idx_dns_events_trace_id ON dns_events(trace_id);
CREATE INDEX IF NOT EXISTS idx_dns_events_decision ON dns_events(decision);
CREATE INDEX IF NOT EXISTS idx_dns_events_policy_rule ON dns_events(policy_rule);

CREATE TABLE IF NOT EXISTS audit_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
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
    {CREDENTIAL_REF}
);

CREATE INDEX IF NOT EXISTS idx_audit_events_timestamp ON audit_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_audit_events_exe ON audit_events(exe);
CREATE INDEX IF NOT EXISTS idx_audit_events_pid ON audit_events(pid);
CREATE INDEX IF NOT EXISTS idx_audit_events_ppid ON audit_events(ppid);

CREATE TABLE IF NOT EXISTS substitution_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    {EVENT_ID},
    timestamp TEXT NOT NULL,
    material_class TEXT NOT NULL,
    source TEXT NOT NULL,
    event_type TEXT,
    algorithm TEXT NOT NULL,
    substitution_ref TEXT NOT NULL CHECK (length(substitution_ref) = 82
        AND substitution_ref GLOB 'credential:blake3:[0-9a-f]*'),
    outcome TEXT NOT NULL CHECK (outcome IN {one_of(SUBSTITUTION_OUTCOMES)}),
    provider TEXT,
    confidence REAL,
    trace_id TEXT,
    turn_id TEXT,
    context_json TEXT
);

CREATE INDEX IF NOT EXISTS idx_substitution_events_timestamp ON substitution_events(timestamp);
CREATE INDEX IF NOT EXISTS idx_substitution_events_ref ON substitution_events(substitution_ref);
CREATE INDEX IF NOT EXISTS idx_substitution_events_material ON substitution_events(material_class);
"""
