"""Behaviour of capsem_core.schema: the v2 DDL, its constraints, and refusing other builds' ledgers."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from capsem_core import schema
from capsem_core.errors import LedgerError, SchemaMismatch

GOLDEN = Path(__file__).parent.parent / "golden" / "schema_v2_catalog.json"
HASH = "blake3:" + "ab" * 32
CRED = "credential:blake3:" + "cd" * 32


def catalog(conn: sqlite3.Connection) -> dict[str, Any]:
    """What a database's catalog says, in creation order: tables, columns, indexes, marker."""
    tables = []
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid"):
        columns = [[r[1], r[2], r[3], r[4], r[5]] for r in conn.execute(f"PRAGMA table_xinfo({name})")]
        fks = [[r[3], r[2], r[4]] for r in conn.execute(f"PRAGMA foreign_key_list({name})")]
        tables.append({"name": name, "columns": columns, "foreign_keys": fks})
    indexes = []
    for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY rowid"):
        info = next(r for r in conn.execute(f"PRAGMA index_list({table})") if r[1] == name)
        indexes.append({"name": name, "table": table,
                        "columns": [r[2] for r in conn.execute(f"PRAGMA index_info({name})")],
                        "unique": bool(info[2]), "origin": info[3], "partial": bool(info[4])})
    return {"tables": tables, "indexes": indexes,
            "transport_schema": [list(r) for r in conn.execute("SELECT id, version FROM transport_schema")]}


def new_ledger(tmp_path: Path, name: str = "session.db") -> tuple[sqlite3.Connection, Path]:
    path = tmp_path / name
    conn = sqlite3.connect(path)
    schema.create_schema(conn)
    return conn, path


def refused(conn: sqlite3.Connection, path: Path) -> str:
    with pytest.raises(SchemaMismatch) as info:
        schema.check_schema(conn, path)
    message = str(info.value)
    assert str(path) in message
    return message


def blob_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "event_id": "0123456789ab", "event_type": "http.request", "source_table": "net_events",
        "direction": "request", "content_type": "application/json", "original_bytes": 10,
        "stored_bytes": 10, "truncated": 0, "body_hash": HASH, "block_offset": 16,
        "body_offset": 0, "body_len": 10, "trace_id": None, "turn_id": None,
        "created_at": "2025-01-01T00:00:00Z",
    }
    row.update(changes)
    return row


def insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(row.values()))


def add_block(conn: sqlite3.Connection, offset: int = 16) -> None:
    conn.execute("INSERT INTO body_blocks VALUES (?, 100, 200, '2025-01-01T00:00:00Z')", (offset,))


def rebuild_table(conn: sqlite3.Connection, table: str, edit: Callable[[str], str]) -> None:
    """Replace ``table`` by one whose CREATE statement is ``edit``ed (an older/newer build's shape)."""
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    new_sql = edit(sql)
    assert new_sql != sql
    conn.execute(f"DROP TABLE {table}")
    conn.execute(new_sql)
    conn.commit()


def drop_column_line(column: str) -> Callable[[str], str]:
    def edit(sql: str) -> str:
        lines = sql.splitlines()
        kept = [line for line in lines if not line.strip().startswith(column + " ")]
        assert len(kept) == len(lines) - 1
        return "\n".join(kept).replace(",\n)", "\n)")
    return edit


# --- the catalog ------------------------------------------------------------------------

def test_a_fresh_ledger_has_exactly_the_reference_catalog(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    got = catalog(conn)
    assert got == json.loads(GOLDEN.read_text())
    names = [t["name"] for t in got["tables"]]
    # SQLite adds sqlite_sequence with the first AUTOINCREMENT table; the rest are the DDL's.
    assert names == ["net_events", "sqlite_sequence"] + list(schema.TABLES[1:])
    declared = [i for i in got["indexes"] if i["origin"] == "c"]
    automatic = [i["name"] for i in got["indexes"] if i["origin"] == "u"]
    assert len(declared) == 91
    assert automatic == ["sqlite_autoindex_event_body_blobs_1", "sqlite_autoindex_model_items_1",
                         "sqlite_autoindex_transport_events_1"]
    assert [i["name"] for i in got["indexes"] if i["partial"]] == ["idx_model_calls_usage_details"]
    assert got["transport_schema"] == [[1, 1]]
    for table in schema.TABLES:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == (table == "transport_schema")


def test_table_columns_follow_the_ddl_order_of_every_table(tmp_path: Path) -> None:
    golden = {t["name"]: tuple(c[0] for c in t["columns"]) for t in json.loads(GOLDEN.read_text())["tables"]}
    for table in schema.TABLES:
        assert schema.table_columns(table) == golden[table]
    assert schema.table_columns("event_body_blobs") == (
        "id", "event_id", "event_type", "source_table", "direction", "content_type", "original_bytes",
        "stored_bytes", "truncated", "body_hash", "block_offset", "body_offset", "body_len",
        "trace_id", "turn_id", "created_at")
    assert schema.table_columns("body_blocks") == ("block_offset", "raw_len", "disk_len", "sealed_at")
    with pytest.raises(KeyError, match="archive_state"):
        schema.table_columns("archive_state")


def test_every_statement_is_if_not_exists_and_the_marker_insert_or_ignore() -> None:
    statements = [s.strip() for s in schema.SCHEMA_SQL.split(";") if s.strip()]
    creates = [s for s in statements if s.startswith("CREATE")]
    assert len(creates) == 18 + 91
    assert all(s.startswith(("CREATE TABLE IF NOT EXISTS", "CREATE INDEX IF NOT EXISTS")) for s in creates)
    assert [s for s in statements if not s.startswith("CREATE")] == [
        "INSERT OR IGNORE INTO transport_schema(id, version) VALUES (1, 1)"]


def test_applying_the_ddl_twice_changes_nothing(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    add_block(conn)
    insert(conn, "event_body_blobs", blob_row())
    conn.commit()
    before = (catalog(conn), conn.execute("PRAGMA schema_version").fetchone()[0],
              conn.execute("SELECT * FROM event_body_blobs").fetchall())
    schema.create_schema(conn)
    conn.executescript(schema.SCHEMA_SQL)
    after = (catalog(conn), conn.execute("PRAGMA schema_version").fetchone()[0],
             conn.execute("SELECT * FROM event_body_blobs").fetchall())
    assert after == before


def test_create_schema_commits_its_own_transaction_and_nests_in_a_callers(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    conn = sqlite3.connect(path)
    schema.create_schema(conn)
    assert not conn.in_transaction
    other = sqlite3.connect(path)
    schema.check_schema(other, path)
    conn.execute("BEGIN")
    conn.execute("INSERT INTO body_blocks VALUES (16, 1, 9, 't')")
    schema.create_schema(conn)
    assert conn.in_transaction
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM body_blocks").fetchone()[0] == 0


def test_a_ledger_with_rows_but_no_transport_ledger_is_not_given_an_empty_one(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    conn.execute("INSERT INTO net_events (timestamp, domain, decision) VALUES ('t', 'example.com', 'allowed')")
    conn.execute("DROP TABLE transport_schema")
    conn.execute("DROP TABLE transport_events")
    conn.commit()
    with pytest.raises(SchemaMismatch, match="refusing to recreate transport_events empty"):
        schema.create_schema(conn, path)
    assert "transport_events" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not conn.in_transaction
    assert "predates the transport ledger" in refused(conn, path)


def test_a_lost_transport_events_table_is_not_recreated_while_the_marker_stands(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    conn.execute("DROP TABLE transport_events")
    conn.commit()
    schema.create_schema(conn)
    assert "missing table transport_events" in refused(conn, path)


# --- constraints --------------------------------------------------------------------------

def test_a_well_formed_body_row_and_block_are_accepted_with_foreign_keys_on(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    conn.execute("PRAGMA foreign_keys = ON")
    add_block(conn)
    insert(conn, "event_body_blobs", blob_row())
    insert(conn, "event_body_blobs", blob_row(direction="response", original_bytes=20, truncated=1))
    assert conn.execute("SELECT count(*) FROM event_body_blobs").fetchone()[0] == 2


@pytest.mark.parametrize("changes", [
    {"event_id": "0123456789AB"},  # uppercase hex
    {"event_id": "0123456789a"},  # 11 characters
    {"event_id": "0123456789abc"},  # 13 characters
    {"event_id": "0123456789ag"},  # not hex
    {"event_id": None},
    {"body_hash": "blake3:" + "AB" * 32},  # uppercase first digit
    {"body_hash": "blake3:" + "ab" * 31},  # too short
    {"body_hash": "sha256:" + "ab" * 32},
    {"body_hash": "blake3:" + "ab" * 32 + "0"},
    {"direction": "upload"},
    {"direction": "Request"},
    {"source_table": "fs_events"},
    {"source_table": "transport_events"},
    {"event_type": "network.connect"},  # list B only, not for bodies
    {"event_type": "HTTP.request"},
    {"original_bytes": -1, "stored_bytes": -1, "body_len": -1},
    {"stored_bytes": -1, "body_len": -1},
    {"body_offset": -1},
    {"stored_bytes": 11, "body_len": 11},  # more stored than the boundary saw
    {"body_len": 9},  # body_len must equal stored_bytes
    {"truncated": 2},
    {"created_at": None},
], ids=lambda c: ",".join(f"{k}={v!r}"[:40] for k, v in c.items()))
def test_the_body_index_rejects_a_malformed_row(tmp_path: Path, changes: dict[str, Any]) -> None:
    conn, _ = new_ledger(tmp_path)
    add_block(conn)
    with pytest.raises(sqlite3.IntegrityError):
        insert(conn, "event_body_blobs", blob_row(**changes))


def test_every_body_vocabulary_value_is_accepted_and_the_key_is_event_source_direction(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    add_block(conn)
    n = 0
    for event_type in schema.BODY_EVENT_TYPES:
        for source in schema.BODY_SOURCE_TABLES:
            for direction in schema.BODY_DIRECTIONS:
                insert(conn, "event_body_blobs", blob_row(
                    event_id=f"{n:012x}", event_type=event_type, source_table=source, direction=direction))
                n += 1
    assert conn.execute("SELECT count(*) FROM event_body_blobs").fetchone()[0] == n == 16 * 8 * 5
    insert(conn, "event_body_blobs", blob_row(event_id="00000000ffff", source_table="security_rule_events",
                                              direction="payload"))
    insert(conn, "event_body_blobs", blob_row(event_id="00000000ffff", source_table="security_ask_events",
                                              direction="payload"))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        insert(conn, "event_body_blobs", blob_row(event_id="00000000ffff", source_table="security_ask_events",
                                                  direction="payload", body_hash="blake3:" + "0" * 64))


def test_a_body_row_must_name_an_existing_block_when_foreign_keys_are_on(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    conn.execute("PRAGMA foreign_keys = ON")
    add_block(conn, 16)
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        insert(conn, "event_body_blobs", blob_row(block_offset=4096))
    insert(conn, "event_body_blobs", blob_row(block_offset=16))
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("DELETE FROM body_blocks WHERE block_offset = 16")
    # Off (SQLite's default), the same orphan goes in: enforcement is the connection's choice
    # (and the pragma is a no-op inside a transaction, hence the commit).
    conn.commit()
    conn.execute("PRAGMA foreign_keys = OFF")
    insert(conn, "event_body_blobs", blob_row(block_offset=4096, event_id="ffffffffffff"))


@pytest.mark.parametrize("raw_len,disk_len", [(0, 10), (10, 0), (-5, 10)])
def test_a_block_row_must_have_positive_lengths(tmp_path: Path, raw_len: int, disk_len: int) -> None:
    conn, _ = new_ledger(tmp_path)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("INSERT INTO body_blocks VALUES (16, ?, ?, 't')", (raw_len, disk_len))


def test_an_omitted_event_id_gets_twelve_random_lowercase_hex_digits(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    for _ in range(50):
        conn.execute("INSERT INTO net_events (timestamp, domain, decision) VALUES ('t', 'example.com', 'allowed')")
    rows = conn.execute("SELECT event_id, port, conn_type, headers_truncated FROM net_events").fetchall()
    ids = {r[0] for r in rows}
    assert len(ids) == 50
    assert all(len(i) == 12 and set(i) <= set("0123456789abcdef") for i in ids)
    assert {r[1:] for r in rows} == {(443, "https", 0)}
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO security_rule_events (timestamp_unix_ms, event_type, rule_id, rule_action, "
                     "rule_json) VALUES (1, 'model.call', 'r', 'allow', '{}')")


def test_correlation_and_security_checks_reject_what_the_reference_rejects(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    net = "INSERT INTO net_events (timestamp, domain, decision, credential_ref) VALUES ('t', 'd', 'allowed', ?)"
    conn.execute(net, (None,))
    conn.execute(net, (CRED,))
    for bad in ("credential:blake3:" + "cd" * 31, "blake3:" + "cd" * 32 + "x" * 11, CRED.upper()):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(net, (bad,))
    rule = ("INSERT INTO security_rule_events (timestamp_unix_ms, event_id, event_type, rule_id, rule_action, "
            "rule_json) VALUES (1, '00000000000a', ?, 'r', 'block', ?)")
    for event_type in schema.SECURITY_EVENT_TYPES:
        conn.execute(rule, (event_type, "{}"))
    for event_type, rule_json in (("security.decision", "{}"), ("model.call", "{not json")):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(rule, (event_type, rule_json))
    assert set(schema.SECURITY_EVENT_TYPES) - set(schema.BODY_EVENT_TYPES) == set(schema.TRANSPORT_EVENT_TYPES)
    assert set(schema.BODY_EVENT_TYPES) - set(schema.SECURITY_EVENT_TYPES) == {"security.decision"}


def test_the_transport_ledger_bounds_event_json_in_bytes_and_keeps_one_marker_row(tmp_path: Path) -> None:
    conn, _ = new_ledger(tmp_path)
    ins = ("INSERT INTO transport_events (event_id, timestamp_unix_ms, event_type, event_json) "
           "VALUES (?, ?, 'network.connect', ?)")
    fits = json.dumps("é" * ((65536 - 2) // 2), ensure_ascii=False)  # 65,536 bytes, 32,769 characters
    conn.execute(ins, ("00000000000a", 0, fits))
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(ins, ("00000000000b", 0, json.dumps("é" * ((65536 - 2) // 2) + "x", ensure_ascii=False)))
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(ins, ("00000000000c", -1, "{}"))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute(ins, ("00000000000a", 1, "{}"))
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO transport_schema VALUES (2, 1)")
    conn.execute("INSERT OR IGNORE INTO transport_schema(id, version) VALUES (1, 7)")
    assert conn.execute("SELECT id, version FROM transport_schema").fetchall() == [(1, 1)]


# --- refusing other builds' ledgers -------------------------------------------------------

def test_a_fresh_ledger_passes_the_shape_check(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    schema.check_schema(conn, path)
    schema.check_schema(sqlite3.connect(path), path)


@pytest.mark.parametrize("statement,words", [
    ("DROP TABLE transport_schema", "predates the transport ledger: transport_schema is missing"),
    ("DELETE FROM transport_schema", "carries no version row: the ledger was torn mid-stamp"),
    ("DROP TABLE fs_events", "missing table fs_events"),
    ("PRAGMA user_version = 3", "newer build: PRAGMA user_version is 3"),
])
def test_a_ledger_one_statement_away_from_v2_is_refused_naming_the_mismatch(
        tmp_path: Path, statement: str, words: str) -> None:
    conn, path = new_ledger(tmp_path)
    conn.execute(statement)
    conn.commit()
    assert words in refused(conn, path)


@pytest.mark.parametrize("version,words", [
    (2, "newer build: unsupported transport schema version 2"),
    (0, "unsupported transport schema version 0"),
    ("1", "unsupported transport schema version '1'"),
])
def test_an_unknown_transport_version_is_refused(tmp_path: Path, version: object, words: str) -> None:
    conn, path = new_ledger(tmp_path)
    conn.execute("DROP TABLE transport_schema")
    conn.execute("CREATE TABLE transport_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version)")
    conn.execute("INSERT INTO transport_schema VALUES (1, ?)", (version,))
    conn.commit()
    assert words in refused(conn, path)


def test_a_ledger_from_a_later_archive_era_is_refused_as_newer(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    conn.execute("CREATE TABLE archive_state (id INTEGER PRIMARY KEY, format_version INTEGER, committed_end INTEGER)")
    conn.commit()
    message = refused(conn, path)
    assert "newer build (archive format v3 or later)" in message and "archive_state" in message


def test_a_security_table_that_still_keeps_event_json_is_refused_as_older(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    rebuild_table(conn, "security_decision_events",
                  lambda sql: sql.replace("    reason TEXT,", "    reason TEXT,\n    event_json TEXT NOT NULL,"))
    message = refused(conn, path)
    assert "security_decision_events keeps its payload inline in event_json" in message
    assert "older build" in message


def test_a_security_table_with_an_older_event_type_list_is_refused(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    rebuild_table(conn, "security_ask_events", lambda sql: sql.replace(", 'network.probe_result'", ""))
    message = refused(conn, path)
    assert "security_ask_events constrains event_type to an older list" in message
    assert "lacks network.probe_result" in message


def test_a_security_table_with_a_newer_event_type_list_is_refused(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    rebuild_table(conn, "security_rule_events",
                  lambda sql: sql.replace("'network.probe_result'", "'network.probe_result', 'agent.step'"))
    assert "security_rule_events constrains event_type to a newer list" in refused(conn, path)


def test_the_same_event_type_list_spelled_another_way_is_accepted(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    quoted = ",".join(f"'{v}'" for v in reversed(schema.SECURITY_EVENT_TYPES))

    def respell(sql: str) -> str:
        start = sql.index("CHECK (event_type IN (")
        end = sql.index("))", start) + 2
        return sql[:start] + f'CHECK("event_type" in({quoted}))' + sql[end:]
    rebuild_table(conn, "security_rule_events", respell)
    schema.check_schema(conn, path)


def test_a_body_index_missing_a_column_is_refused_naming_it(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    rebuild_table(conn, "event_body_blobs", drop_column_line("body_hash"))
    assert "table event_body_blobs lacks column body_hash" in refused(conn, path)


@pytest.mark.parametrize("table,column", [
    ("net_events", "decision"), ("net_events", "credential_ref"), ("model_calls", "usage_details"),
    ("tool_calls", "call_id"), ("tool_responses", "call_id"), ("fs_events", "kind"),
    ("body_blocks", "disk_len"), ("event_body_blobs", "body_offset"), ("event_body_blobs", "created_at"),
    ("transport_events", "connection_id"), ("security_rule_events", "rule_action"),
])
def test_every_column_the_project_reads_is_required(tmp_path: Path, table: str, column: str) -> None:
    conn, path = new_ledger(tmp_path)
    rebuild_table(conn, table, drop_column_line(column))
    assert f"table {table} lacks column {column}" in refused(conn, path)


def test_a_v1_era_ledger_with_inline_bodies_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    conn = sqlite3.connect(path)
    # The v1 era's body index: bytes inline, no block coordinates, no transport ledger.
    conn.execute("""CREATE TABLE event_body_blobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, event_type TEXT NOT NULL,
        source_table TEXT NOT NULL, direction TEXT NOT NULL, content_type TEXT,
        original_bytes INTEGER NOT NULL, stored_bytes INTEGER NOT NULL, truncated INTEGER NOT NULL,
        body_hash TEXT NOT NULL, body BLOB NOT NULL, trace_id TEXT, turn_id TEXT, created_at TEXT NOT NULL)""")
    conn.execute("CREATE TABLE net_events (id INTEGER PRIMARY KEY, timestamp TEXT, domain TEXT)")
    conn.commit()
    message = refused(conn, path)
    assert "keeps body bytes inline in a body column (a v1-era ledger" in message
    assert "table event_body_blobs lacks columns block_offset, body_offset, body_len" in message
    assert "predates the transport ledger" in message


def test_an_empty_database_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    path.write_bytes(b"")
    assert "empty database: it holds no tables at all" in refused(sqlite3.connect(path), path)


def test_a_foreign_sqlite_database_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "main.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    conn.commit()
    assert "not a Capsem session ledger" in refused(conn, path)


@pytest.mark.parametrize("content", [b"CAPSEMBL" + b"\0" * 8 + b"x" * 4000, b"SQLite format 3\0" + b"\xff" * 84])
def test_a_file_that_is_not_sqlite_gets_a_clear_error_naming_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "session.db"
    path.write_bytes(content)
    conn = sqlite3.connect(path)
    with pytest.raises(LedgerError) as info:
        schema.check_schema(conn, path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, SchemaMismatch)
    with pytest.raises(SchemaMismatch, match="not a SQLite session ledger"):
        schema.ReadyCheck(conn, path).ready()


# --- readiness ----------------------------------------------------------------------------

def test_ready_runs_the_full_check_once_and_again_only_when_the_schema_changes(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    probe = schema.ReadyCheck(conn, path)
    for _ in range(100):
        probe.ready()
    assert probe.full_checks == 1
    add_block(conn)
    conn.commit()
    probe.ready()
    assert probe.full_checks == 1  # rows do not move the schema cookie
    conn.execute("CREATE TABLE scratch (x)")
    conn.commit()
    probe.ready()
    probe.ready()
    assert probe.full_checks == 2
    conn.execute("CREATE TABLE archive_state (format_version INTEGER)")
    conn.commit()
    with pytest.raises(SchemaMismatch, match="archive_state"):
        probe.ready()
    with pytest.raises(SchemaMismatch, match="archive_state"):
        probe.ready()
    assert probe.full_checks == 4  # a failed check is never cached


def test_ready_sees_a_schema_change_made_by_another_connection(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    probe = schema.ReadyCheck(conn, path)
    probe.ready()
    other = sqlite3.connect(path)
    other.execute("DROP TABLE transport_schema")
    other.commit()
    with pytest.raises(SchemaMismatch, match="predates the transport ledger"):
        probe.ready()
    assert probe.full_checks == 2


def test_ready_refuses_a_version_row_changed_without_a_schema_change(tmp_path: Path) -> None:
    conn, path = new_ledger(tmp_path)
    probe = schema.ReadyCheck(conn, path)
    probe.ready()
    conn.execute("UPDATE transport_schema SET version = 2")
    conn.commit()
    with pytest.raises(SchemaMismatch, match="unsupported transport schema version 2"):
        probe.ready()


def _vm_steps(conn: sqlite3.Connection, call: Callable[[], None]) -> int:
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0
    conn.set_progress_handler(count, 1)
    try:
        call()
    finally:
        conn.set_progress_handler(None, 1)
    return steps


def test_ready_does_the_same_work_on_a_large_ledger_as_on_a_small_one(tmp_path: Path) -> None:
    # Counting SQLite VM instructions proves no table page is scanned: the work is fixed.
    steps = []
    for rows in (1_000, 50_000):
        conn, path = new_ledger(tmp_path, f"session-{rows}.db")
        counter = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) "
        conn.execute(counter + "INSERT INTO net_events (timestamp, domain, decision, bytes_sent) "
                     "SELECT 't', 'host' || (i % 97) || '.example', 'allowed', i FROM n")
        add_block(conn)
        conn.execute(counter + "INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, "
                     "original_bytes, stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, "
                     f"created_at) SELECT printf('%012x', i), 'http.request', 'net_events', 'request', 5, 5, 0, "
                     f"'{HASH}', 16, 0, 5, 't' FROM n")
        conn.commit()
        probe = schema.ReadyCheck(conn, path)
        full = _vm_steps(conn, probe.ready)
        cached = _vm_steps(conn, probe.ready)
        assert probe.full_checks == 1
        steps.append((full, cached))
        conn.close()
    assert steps[0] == steps[1]
    assert steps[0][1] < steps[0][0]


def write_golden() -> None:
    """Regenerate the golden catalog (``python3 tests/schema/test_schema.py --write-golden``); review the diff."""
    conn = sqlite3.connect(":memory:")
    schema.create_schema(conn)
    got = catalog(conn)
    # One line per column and per index: small enough to review by eye.
    lines = ['{"tables": [']
    for i, table in enumerate(got["tables"]):
        lines.append(f' {{"name": {json.dumps(table["name"])}, "foreign_keys": {json.dumps(table["foreign_keys"])}, '
                     '"columns": [')
        lines.append(",\n".join(f"  {json.dumps(c)}" for c in table["columns"]))
        lines.append(" ]}" + ("," if i < len(got["tables"]) - 1 else ""))
    lines.append('], "indexes": [')
    lines.append(",\n".join(f" {json.dumps(ix)}" for ix in got["indexes"]))
    lines.append(f'], "transport_schema": {json.dumps(got["transport_schema"])}}}')
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == got
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(text)


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    write_golden()
