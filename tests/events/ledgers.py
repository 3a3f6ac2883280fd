"""Small ledgers for the events tests: rows in three event tables (text and millisecond times,
with and without bodies), at times one millisecond apart, written by the real writer."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from capsem_core.writer import Body, LedgerWriter, ledger_timestamp

START_S = 1_748_854_800.0


def event_id(i: int, salt: int = 0) -> str:
    return f"{(i * 7919 + salt * 104729) & 0xFFFFFFFFFFFF:012x}"


def row_for(i: int, salt: int = 0) -> tuple[str, dict[str, object], list[Body]]:
    """Row ``i`` of a mixed ledger: net_events (with a request body on every other one),
    fs_events, then security_decision_events (a payload body), round robin."""
    when = START_S + i / 1000
    eid = event_id(i, salt)
    kind = i % 3
    if kind == 0:
        bodies = [Body("request", f"req {i}".encode(), "http.request"),
                  Body("response", f"resp {i}".encode(), "http.request")] if i % 2 == 0 else []
        return "net_events", {"event_id": eid, "timestamp": ledger_timestamp(when), "domain": f"d{i}.example",
                              "decision": "allowed"}, bodies
    if kind == 1:
        return "fs_events", {"event_id": eid, "timestamp": ledger_timestamp(when), "action": "write",
                             "path": f"/w/{i}"}, []
    return "security_decision_events", {"timestamp_unix_ms": round(when * 1000), "event_id": eid,
                                        "event_type": "http.request", "stage": "rule", "actor": "policy",
                                        "previous_decision": "allow", "requested_decision": "allow",
                                        "effective_decision": "allow"}, \
        [Body("payload", f"payload {i}".encode(), "security.decision")]


def write_mixed(directory: Path, count: int, *, first: int = 0, salt: int = 0, flush_every: int = 25) -> None:
    """Rows ``first .. first+count-1`` (see ``row_for``), one commit per ``flush_every`` rows."""
    with LedgerWriter(directory) as writer:
        for i in range(first, first + count):
            table, row, bodies = row_for(i, salt)
            writer.insert(table, row, bodies=bodies)
            if (i + 1) % flush_every == 0:
                writer.flush()


def all_rows(directory: Path) -> set[tuple[str, int]]:
    """Every (table, id) of the ledger's event tables, read with plain SQL."""
    from capsem_core.events import EVENT_TABLE_NAMES

    conn = sqlite3.connect(directory / "session.db")
    try:
        return {(t, i) for t in EVENT_TABLE_NAMES for (i,) in conn.execute(f"SELECT id FROM {t}")}
    finally:
        conn.close()
