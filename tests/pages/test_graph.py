"""The identity graph decided from session.db's own pages (pages/graph.py): on sound
samples of every mix every part holds from its pages with the counts its SQL reports; for
each way of breaking an invariant, the part it breaks is handed to its SQL; and whatever the
damage (NULLs under SQL's own rules, values of another kind, ids pushed onto overflow pages,
texts too long to code), the section built from the pages where they hold is exactly the one
the SQL alone builds."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core._native import _pages
from capsem_core import snapshot as opening
from capsem_core.check import identity
from capsem_core.pages import graph as identity_pages
from capsem_core.check.report import CheckResult
from capsem_core.sample import write_sample_ledger
from capsem_core.sample.profiles import MIXES
from tests.check.test_identity_graph import ledger, sound  # noqa: F401 (the damaged copies' fixtures)


def sql(db: Path, statement: str) -> None:
    """Run one damaging statement, past the schema's CHECK constraints (a hostile writer is
    not bound by them). ``nullable TABLE COLUMN`` drops the column's NOT NULL from the
    schema first (quick_check would report such NULLs; the decision must still be SQL's)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        if statement.startswith("nullable "):
            _, table, column = statement.split()
            [ddl] = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (table,)).fetchone()
            loose = re.sub(rf"(\b{column} TEXT) NOT NULL", r"\1", ddl, count=1)
            assert loose != ddl
            version = conn.execute("PRAGMA schema_version").fetchone()[0]
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = ?", (loose, table))
            conn.execute(f"PRAGMA schema_version = {version + 1}")
            return
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(statement)
    finally:
        conn.close()

MODEL_ITEMS, TOOL_CALLS, TURNS, SECURITY = range(4)


def _section(parts: list[CheckResult]) -> dict:
    result = CheckResult("identity_graph", "Identity graph")
    identity.merge_parts(result, parts)
    return result.to_json()


def both_ways(db: Path, stopped: bool | None = None) -> tuple[list[CheckResult | None], dict, dict]:
    """(what the pages decide per part, the section built from them, the section from SQL)."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    mapped = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        graph = identity_pages.read_graph(mapped, conn)
        assert graph is not None
        held = [identity.held_part(graph, i) for i in range(4)]
        by_sql = [part(conn) for part in identity.session_parts(stopped)]
        gated = [h if h is not None else s for h, s in zip(held, by_sql)]
        return held, _section(gated), _section(by_sql)
    finally:
        mapped.close()
        conn.close()


@pytest.mark.parametrize("mix", MIXES)
def test_a_sound_sample_of_every_mix_holds_every_part_from_its_pages(mix: str, tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / mix, seed=5, mix=mix, bodies=300 if mix != "large" else 30)
    held, gated, by_sql = both_ways(tmp_path / mix / "session.db")
    assert all(part is not None for part in held)
    assert gated == by_sql and by_sql["findings"] == []
    assert by_sql["counts"]["model_items"] > 0 and by_sql["counts"]["turns"] > 0


FIRST_TOOL_CALL_ITEM = "(SELECT MIN(id) FROM model_items WHERE kind = 'tool_call')"
FIRST_EMITTED_CALL = "(SELECT MIN(id) FROM tool_calls WHERE model_call_id IS NOT NULL)"
FIRST_MCP_RULE = "(SELECT MIN(id) FROM security_rule_events WHERE event_type = 'mcp.tool_call')"

# (what is done, the SQL doing it, the part it breaks or None when it breaks none)
DAMAGE: list[tuple[str, list[str], int | None]] = [
    ("items naming no exchange", ["UPDATE model_items SET model_call_id = 999999 WHERE id IN "
                                  "(SELECT id FROM model_items ORDER BY id LIMIT 2)"], MODEL_ITEMS),
    ("an item naming a negative exchange", ["UPDATE model_items SET model_call_id = -5 WHERE id = 1"], MODEL_ITEMS),
    ("an item naming an exchange past 32 bits", [f"UPDATE model_items SET model_call_id = {2 ** 40} "
                                                 f"WHERE id = {FIRST_TOOL_CALL_ITEM}"], MODEL_ITEMS),
    ("a tool call item with no call_id", ["nullable model_items call_id", f"UPDATE model_items SET call_id = NULL WHERE id = {FIRST_TOOL_CALL_ITEM}"],
     TOOL_CALLS),
    ("a result item of a call the ledger lacks", [
        "UPDATE model_items SET call_id = 'ghost' WHERE id = (SELECT MIN(id) FROM model_items "
        "WHERE kind = 'tool_response')"], MODEL_ITEMS),
    ("an emitted call unlinked from its exchange", [
        f"UPDATE tool_calls SET model_call_id = NULL WHERE id = {FIRST_EMITTED_CALL}"], MODEL_ITEMS),
    ("an emitted call with no call_id", ["nullable tool_calls call_id", f"UPDATE tool_calls SET call_id = NULL WHERE id = {FIRST_EMITTED_CALL}"],
     TOOL_CALLS),
    ("emitted calls missing from the items", ["DELETE FROM model_items WHERE id IN "
                                              "(SELECT id FROM model_items WHERE kind = 'tool_call' LIMIT 3)"],
     TOOL_CALLS),
    ("a result carried by its call's own exchange", [
        """UPDATE tool_responses SET model_call_id = (SELECT c.model_call_id FROM tool_calls AS c
           WHERE c.call_id = tool_responses.call_id) WHERE id = (SELECT MIN(id) FROM tool_responses)"""], TOOL_CALLS),
    ("the same, where both rows lack a trace (IS matches NULL)", [
        "UPDATE tool_responses SET trace_id = NULL WHERE id = (SELECT MIN(id) FROM tool_responses)",
        """UPDATE tool_calls SET trace_id = NULL, model_call_id = (SELECT r.model_call_id FROM tool_responses AS r
           WHERE r.id = (SELECT MIN(id) FROM tool_responses))
           WHERE call_id = (SELECT call_id FROM tool_responses WHERE id = (SELECT MIN(id) FROM tool_responses))"""],
     TOOL_CALLS),
    ("a result with no trace against a traced call", [
        "UPDATE tool_responses SET trace_id = NULL WHERE id = (SELECT MIN(id) FROM tool_responses)"], None),
    ("a turn in a second trace", ["UPDATE fs_events SET trace_id = 'trace-elsewhere' WHERE id = "
                                  "(SELECT MIN(id) FROM fs_events WHERE turn_id IS NOT NULL)"], TURNS),
    ("a body row's turn in a second trace", ["UPDATE event_body_blobs SET trace_id = 'x' WHERE id = "
                                             "(SELECT MAX(id) FROM event_body_blobs WHERE turn_id IS NOT NULL)"], TURNS),
    ("a turn with no exchange", ["UPDATE fs_events SET turn_id = 'lonely-turn' WHERE id = "
                                 "(SELECT MIN(id) FROM fs_events)"], TURNS),
    ("rows with no turn", ["UPDATE net_events SET turn_id = NULL WHERE id % 3 = 0"], None),
    ("an MCP call with no tool call", [f"UPDATE security_rule_events SET event_id = 'nowhere' WHERE id = "
                                       f"{FIRST_MCP_RULE}"], SECURITY),
    ("an MCP call with no event_id (NOT IN is NULL)", [
        "nullable security_rule_events event_id", f"UPDATE security_rule_events SET event_id = NULL WHERE id = {FIRST_MCP_RULE}"], None),
    ("a tool call with no event_id (its MCP row's NOT IN is NULL)", [
        "nullable tool_calls event_id", "UPDATE tool_calls SET event_id = NULL WHERE event_id = (SELECT event_id FROM security_rule_events "
        f"WHERE id = {FIRST_MCP_RULE})"], None),
    ("security rows about deleted events", ["DELETE FROM dns_events WHERE id IN (SELECT id FROM dns_events LIMIT 2)"],
     SECURITY),
    ("security rows with no event_id about a table left empty (NOT IN an empty set is true)", [
        "nullable security_decision_events event_id", "DELETE FROM dns_events",
        "UPDATE security_decision_events SET event_id = NULL WHERE event_type = 'dns.query'",
        "UPDATE security_rule_events SET event_type = 'mcp.event' WHERE event_type = 'dns.query'"], SECURITY),
    ("a security row turned into an exempt MCP fact", [
        "UPDATE security_decision_events SET event_type = 'mcp.tool_list', event_id = '000000000000' WHERE id = 1"],
     None),
    ("an exempt MCP fact whose event_id is not 12 hex digits", [
        "UPDATE security_decision_events SET event_type = 'mcp.tool_list', event_id = 'none' WHERE id = 1"], SECURITY),
    ("an exchange id stored as text", ["UPDATE model_items SET model_call_id = 'abc' WHERE id = 1"], MODEL_ITEMS),
    ("an exchange id stored as a real", [f"UPDATE model_items SET model_call_id = 1.5 WHERE id = "
                                         f"{FIRST_TOOL_CALL_ITEM}"], MODEL_ITEMS),
    ("a call_id stored as a blob", [f"UPDATE tool_calls SET call_id = CAST('x' AS BLOB) WHERE id = "
                                    f"{FIRST_EMITTED_CALL}"], TOOL_CALLS),
    ("an event_id too long to code", ["UPDATE net_events SET event_id = hex(zeroblob(3000)) WHERE id = 1"], SECURITY),
    ("ids pushed onto overflow pages", ["UPDATE tool_calls SET arguments = hex(randomblob(20000)) WHERE id <= 5",
                                        "UPDATE net_events SET request_headers = hex(randomblob(9000)) WHERE id <= 5"],
     None),
    ("a split turn on an overflow page", ["UPDATE tool_calls SET arguments = hex(randomblob(20000)) WHERE id <= 5",
                                          "UPDATE tool_calls SET trace_id = 'elsewhere' WHERE id = 3"], TURNS),
]


@pytest.mark.parametrize("what, statements, broken", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_each_damage_is_handed_to_sql_and_the_section_is_the_sqls(
        ledger: Path, what: str, statements: list[str], broken: int | None) -> None:
    for statement in statements:
        sql(ledger, statement)
    held, gated, by_sql = both_ways(ledger)
    assert gated == by_sql
    kinds = {f["code"] for f in by_sql["findings"] if f["severity"] != "info"}
    if broken is None:
        assert not kinds, kinds
        assert all(part is not None for part in held), what   # the pages decide it exactly
    else:
        assert held[broken] is None
        assert kinds or by_sql["findings"] or what.startswith(("an exchange id stored", "a call_id stored",
                                                                "an event_id too long", "an exempt MCP fact"))


def test_a_lonely_turn_of_a_stopped_session_is_its_sqls_warning(ledger: Path) -> None:
    sql(ledger, "UPDATE fs_events SET turn_id = 'lonely-turn' WHERE id = (SELECT MIN(id) FROM fs_events)")
    held, gated, by_sql = both_ways(ledger, stopped=True)
    assert held[TURNS] is None and gated == by_sql
    assert [f["severity"] for f in by_sql["findings"] if f["code"] == "turn_without_model_call"] == ["warning"]


def test_a_database_not_in_utf8_is_left_to_sql(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.commit()
    assert identity_pages.read_graph(_pages.PageFile(db), conn) is None
    conn.close()


def test_a_scan_stopped_midway_leaves_every_part_to_its_sql(ledger: Path) -> None:
    # A Ctrl-C or another check's failure cancels the page check's map; the section then has
    # no half-read arrays to reason about.
    conn = opening.open_read_only(ledger, _db.read_plan(ledger))
    mapped = _pages.PageFile(ledger)
    try:
        conn.execute("BEGIN")
        mapped.cancel()
        assert identity_pages.read_graph(mapped, conn) is None   # no graph: every part runs its SQL
    finally:
        mapped.close()
        conn.close()


def test_event_body_blobs_the_parts_read_nothing_of_is_joined_as_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the identity benchmark's baseline asks: the lifecycle's columns only.
    monkeypatch.setattr(identity_pages, "wanted", lambda: {"tool_calls": ("call_id",)})
    graph = identity_pages.Graph()
    joined = identity_pages.join_blobs(None, None, graph, identity_pages.Alongside({}))  # type: ignore[arg-type]
    assert joined is graph and not graph.tables
