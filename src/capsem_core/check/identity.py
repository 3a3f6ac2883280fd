"""The identity graph section of the report: the specification's join contract, checked.

The specification ("Identity Graph", "Key cardinalities") states how a ledger's rows join:
model items to their model exchange, model-visible tool calls and results to the tool ledger
and back, a result carried by a later exchange, a turn inside one trace and holding a model
exchange, MCP calls resolving to logical tool calls, security rows joining back by
``event_id`` to the row they judge, and (``route.py``) main.db's totals to the ledger they
were rolled up from. Each break is a ``Finding`` with a stable code, a count and a few
example rows.

Every statement here is one pass of a table (every row must be checked) whose lookups go
through an index Capsem creates; the comment beside each names it. Where Capsem's schema has
no index for a join (``tool_calls.event_id``), SQLite builds the lookup once per statement
from one pass of the table (an IN list); nothing is ever written (the connection is
query-only, so not even a temp table). Counts and examples come from the same statement:
``COUNT(*) OVER ()`` beside the first ``EXAMPLES`` rows, so a sound ledger returns no row and
a damaged one never makes a Python object per broken row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from capsem_core.check.report import ERROR, NOTE, WARNING, CheckResult, Finding, Value
from capsem_core.check.route import SessionRoute, check_route, read_route, session_stopped
from capsem_core.pages.graph import Graph, model_items_hold, security_holds, tool_calls_hold, turns_hold
from capsem_core.schema.joins import EVENT_TABLES, EXEMPT_EVENT_TYPES, SECURITY_TABLES, TURN_TABLES

# Example rows kept per finding (the count says how many there are in all).
EXAMPLES = 5
# An example's text or blob longer than this many characters (bytes) is cut to it: the
# values are chosen by an agent's counterparty, and a report line must stay a line.
EXAMPLE_CHARS = 200
# The turn check compares an id of more bytes than this by its key (``_long_id``).
LONG_ID_BYTES = 256


def _cut(value: Value) -> Value:
    """An example's value as the report keeps it: a long text or blob cut, saying its size."""
    if isinstance(value, str) and len(value) > EXAMPLE_CHARS:
        return f"{value[:EXAMPLE_CHARS]}... ({len(value)} characters)"
    if isinstance(value, bytes) and len(value) > EXAMPLE_CHARS:
        return value[:EXAMPLE_CHARS] + f"... ({len(value)} bytes)".encode()
    return value


def _long_id(kind: str, data: bytes) -> str | bytes:
    """The key the turn check compares an id of more than LONG_ID_BYTES bytes by: its first
    EXAMPLE_CHARS bytes, its size and a digest of it all, of its own storage class (TEXT or
    BLOB) and always longer than LONG_ID_BYTES bytes, so it equals no short id and no other
    long one. Grouping and ordering by the ids themselves kept every distinct one whole in
    SQLite's temporary tables: 60 ids of 4 MiB took 780 MiB."""
    import hashlib   # here, not at the top: a check of short ids never pays its import (~5 ms)

    digest = hashlib.blake2b(kind.encode() + b"\0" + data, digest_size=16).hexdigest()
    tail = f"... ({len(data)} bytes, blake2b {digest})"
    if kind == "text":
        return data[:EXAMPLE_CHARS].decode("utf-8", "replace") + tail
    return data[:EXAMPLE_CHARS] + tail.encode()


def _id_key(column: str) -> str:
    """SQL for ``column`` as the turn check compares it: itself when short, else _long_id's key."""
    return (f"CASE WHEN length(CAST({column} AS BLOB)) > {LONG_ID_BYTES} "
            f"THEN capsem_long_id(typeof({column}), CAST({column} AS BLOB)) ELSE {column} END")



def _broken(conn: sqlite3.Connection, sql: str, params: Sequence[Value] = ()) -> tuple[int, list[dict[str, Value]]]:
    """(how many rows break, the first few as dicts) of a statement whose last column is
    ``COUNT(*) OVER ()`` and which ends in ``LIMIT ?`` (bound here to EXAMPLES)."""
    cur = conn.execute(sql, (*params, EXAMPLES))
    names = [d[0] for d in cur.description][:-1]
    rows = cur.fetchall()
    if not rows:
        return 0, []
    return int(rows[0][-1]), [{name: _cut(v) for name, v in zip(names, r[:-1])} for r in rows]


def _report(result: CheckResult, code: str, severity: str, message: str, found: tuple[int, list[dict[str, Value]]],
            total: int | None = None) -> None:
    n, examples = found
    result.counts[code] = n
    if n:
        of = f"{n}/{total}" if total is not None else f"{n}"
        result.add(Finding(code, severity, f"{message}: {of}", count=n, examples=examples))


def _count(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def check_model_items(conn: sqlite3.Connection, result: CheckResult) -> None:
    """Invariants 1 and 2: an item names an existing exchange, and an item that is a tool
    call or a tool result names the tool ledger's row with the same call_id and exchange."""
    items = _count(conn, "model_items")
    result.counts["model_items"] = items
    # model_calls.id is the rowid: SQLite probes it for the IN operator (no list is built).
    _report(result, "item_without_model_call", ERROR, "model_items naming a model call model_calls does not record",
            _broken(conn, """
        SELECT i.id, i.event_id, i.model_call_id, i.kind, i.call_id, COUNT(*) OVER ()
        FROM model_items AS i WHERE i.model_call_id NOT IN (SELECT id FROM model_calls)
        ORDER BY i.id LIMIT ?"""), items)
    # idx_tool_calls_call_id / idx_tool_responses_call_id; the unary + keeps SQLite on them
    # (a model call's model_call_id index would hold every call of the exchange). A tool call
    # the model emitted in the last exchange of its trace may not have been made yet (an MCP
    # call is recorded when it is made): the session was cut short, not the ledger broken.
    # It counts once a later exchange of the trace exists (idx_model_calls_trace_id).
    in_flight = ("AND EXISTS (SELECT 1 FROM model_calls AS later "
                 "WHERE later.trace_id = i.trace_id AND later.id > i.model_call_id)")
    for kind, table, code, what, cond in (
            ("tool_call", "tool_calls", "tool_call_item_unrecorded", "tool call", in_flight),
            ("tool_response", "tool_responses", "tool_response_item_unrecorded", "tool result", "")):
        _report(result, code, ERROR,
                f"model_items {what}s no {table} row records (same call_id and model_call_id)", _broken(conn, f"""
            SELECT i.id, i.event_id, i.model_call_id, i.call_id, COUNT(*) OVER ()
            FROM model_items AS i WHERE i.kind = ? AND NOT EXISTS (
                SELECT 1 FROM {table} AS t WHERE t.call_id = i.call_id AND +t.model_call_id = i.model_call_id)
                {cond}
            ORDER BY i.id LIMIT ?""", (kind,)), items)


def check_tool_calls(conn: sqlite3.Connection, result: CheckResult) -> None:
    """Invariants 3 and 4: a model-emitted call is in its exchange's item ledger, and a result
    is carried back by a later exchange than the one that emitted its call."""
    calls, responses = _count(conn, "tool_calls"), _count(conn, "tool_responses")
    result.counts.update(tool_calls=calls, tool_responses=responses)
    # idx_model_items_call_id.
    _report(result, "tool_call_not_in_items", WARNING,
            "model-emitted tool_calls missing from their exchange's model_items (no tool_call item)", _broken(conn, """
        SELECT c.id, c.event_id, c.model_call_id, c.call_id, COUNT(*) OVER ()
        FROM tool_calls AS c WHERE c.model_call_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM model_items AS i
            WHERE i.call_id = c.call_id AND +i.kind = 'tool_call' AND +i.model_call_id = c.model_call_id)
        ORDER BY c.id LIMIT ?"""), calls)
    # idx_tool_calls_call_id; a call of the same trace (IS: both may lack one) that no model
    # emitted (an MCP or built-in call) sets no order.
    _report(result, "response_not_later", ERROR,
            "tool_responses carried by a model call no later than the one that emitted their call", _broken(conn, """
        SELECT r.id, r.event_id, r.call_id, r.model_call_id,
               (SELECT MAX(c.model_call_id) FROM tool_calls AS c
                WHERE c.call_id = r.call_id AND +c.trace_id IS r.trace_id) AS call_model_call_id,
               COUNT(*) OVER ()
        FROM tool_responses AS r WHERE EXISTS (
            SELECT 1 FROM tool_calls AS c WHERE c.call_id = r.call_id AND +c.trace_id IS r.trace_id
                AND +c.model_call_id >= r.model_call_id)
        ORDER BY r.id LIMIT ?"""), responses)


def _turn_union() -> str:
    # Per table, one row per turn through idx_<table>_turn_id: its smallest and largest trace
    # (NULL traces are not compared: such a row records no trace) and whether it is an exchange.
    # Long ids go on as their keys (_long_id), so the rows later grouped and sorted are short.
    return "\n            UNION ALL ".join(
        f"SELECT {_id_key('turn_id')} AS turn_id, MIN({_id_key('trace_id')}) AS lo, MAX({_id_key('trace_id')}) AS hi, "
        f"{int(t == 'model_calls')} AS exchange FROM {t} WHERE turn_id IS NOT NULL GROUP BY turn_id" for t in TURN_TABLES)


def check_turns(conn: sqlite3.Connection, result: CheckResult, stopped: bool | None) -> None:
    """Invariant 5: a turn_id names one trace_id in every table that carries both, and a turn
    holds at least one model exchange once the session has stopped (``stopped``: True, False,
    or None when no home says). Turns of a session not known to have stopped are an info."""
    conn.create_function("capsem_long_id", 2, _long_id, deterministic=True)
    rows = conn.execute(f"""
        WITH turn AS MATERIALIZED (
            SELECT turn_id, MIN(lo) AS first_trace, MAX(hi) AS last_trace, MAX(exchange) AS exchange
            FROM ({_turn_union()}) GROUP BY turn_id)
        SELECT * FROM (SELECT 'split', turn_id, first_trace, last_trace, COUNT(*) OVER ()
                       FROM turn WHERE first_trace < last_trace ORDER BY turn_id LIMIT ?)
        UNION ALL
        SELECT * FROM (SELECT 'lonely', turn_id, first_trace, last_trace, COUNT(*) OVER ()
                       FROM turn WHERE exchange = 0 ORDER BY turn_id LIMIT ?)
        UNION ALL
        SELECT 'turns', NULL, NULL, NULL, COUNT(*) FROM turn""", (EXAMPLES, EXAMPLES)).fetchall()
    found: dict[str, tuple[int, list[dict[str, Value]]]] = {"split": (0, []), "lonely": (0, [])}
    turns = 0
    for what, turn_id, first, last, n in rows:
        if what == "turns":
            turns = int(n)
            continue
        # Ids are short here already: a long one is its key, which says its size and digest.
        example: dict[str, Value] = {"turn_id": turn_id, "trace_id": first}
        if what == "split":
            example["other_trace_id"] = last
        found[what] = (int(n), found[what][1] + [example])
    result.counts["turns"] = turns
    _report(result, "turn_in_many_traces", ERROR, "turn_ids naming more than one trace_id", found["split"], turns)
    if stopped:
        _report(result, "turn_without_model_call", WARNING,
                "turns of a stopped session holding no model exchange (no model_calls row)", found["lonely"], turns)
    else:
        why = "main.db does not record it as stopped" if stopped is False else "no home says the session stopped"
        _report(result, "turn_without_model_call", NOTE,
                f"turns holding no model exchange yet ({why}, so this is not a warning)", found["lonely"], turns)


def _joined(event_type: str, column: str = "s.event_id") -> str:
    """SQL true when the row an event_type names exists (the lookup's index in EVENT_TABLES)."""
    table = EVENT_TABLES[event_type]
    return f"{column} IN (SELECT event_id FROM {table})"


def check_security_joins(conn: sqlite3.Connection, result: CheckResult) -> None:
    """Invariants 6 and 7: an MCP tools/call security row resolves to a logical tool call, and
    a security row about an event the ledger records as a row joins back to it by event_id."""
    # idx_security_rule_events_event_type; tool_calls has no event_id index, so SQLite builds
    # the IN list once, from one pass of tool_calls.
    mcp = int(conn.execute("SELECT COUNT(*) FROM security_rule_events WHERE event_type = 'mcp.tool_call'")
              .fetchone()[0])
    result.counts["mcp_security_calls"] = mcp
    _report(result, "mcp_call_without_tool_call", ERROR,
            "MCP tools/call security rows with no logical tool call (no tool_calls row of that event_id)",
            _broken(conn, f"""
        SELECT s.id, s.event_id, s.rule_id, s.trace_id, COUNT(*) OVER ()
        FROM security_rule_events AS s WHERE s.event_type = 'mcp.tool_call' AND NOT {_joined('mcp.tool_call')}
        ORDER BY s.id LIMIT ?"""), mcp)
    # The three tables in one statement, so tool_calls' IN list is built once; the rule
    # table's MCP calls are invariant 6's. Each other lookup goes through the target's
    # event_id index (EVENT_TABLES).
    arms = "\n            UNION ALL ".join(
        f"SELECT '{t}' AS source_table, id, event_id, event_type FROM {t}"
        + (" WHERE event_type <> 'mcp.tool_call'" if t == "security_rule_events" else "") for t in SECURITY_TABLES)
    cases = "\n                ".join(
        f"WHEN '{event_type}' THEN NOT {_joined(event_type)}" for event_type in EVENT_TABLES)
    total = sum(_count(conn, t) for t in SECURITY_TABLES)
    result.counts["security_rows"] = total
    _report(result, "security_event_unjoined", WARNING,
            "security rows naming an event_id the ledger holds no row of (by their event_type's table)",
            _broken(conn, f"""
        SELECT s.source_table, s.id, s.event_id, s.event_type, COUNT(*) OVER ()
        FROM ({arms}) AS s
        WHERE CASE s.event_type
                {cases}
                ELSE 0 END
        LIMIT ?"""), total)


Part = Callable[[sqlite3.Connection], CheckResult]


def _part(fn: Callable[[sqlite3.Connection, CheckResult], None]) -> Part:
    def run(conn: sqlite3.Connection) -> CheckResult:
        part = CheckResult("identity_graph", "")
        fn(conn, part)
        return part
    return run


def session_parts(stopped: bool | None) -> list[Part]:
    """The invariants that read session.db alone, in the section's order: each a read of one
    connection in the checks' snapshot, independent of the others, so check runs each as a
    step of its own on any connection of the snapshot; ``stopped`` as for ``check_turns``."""
    return [_part(check_model_items), _part(check_tool_calls),
            _part(lambda conn, result: check_turns(conn, result, stopped)), _part(check_security_joins)]


def _held(counts: dict[str, int]) -> CheckResult:
    part = CheckResult("identity_graph", "")
    part.counts.update(counts)
    return part


def held_part(graph: Graph, i: int) -> CheckResult | None:
    """Part ``i`` of the section (0-3, its order): the result its SQL would give, where the
    arrays read from the pages (``pages.graph``) show it holds, else None (its SQL must run:
    ``session_parts``). Each part runs as its own step, so each computes only its own joins."""
    rows = {t: graph.tables[t].rows for t in graph.tables}
    if i == 0:
        return _held({"model_items": rows["model_items"], "item_without_model_call": 0,
                      "tool_call_item_unrecorded": 0, "tool_response_item_unrecorded": 0}) \
            if model_items_hold(graph) else None
    if i == 1:
        return _held({"tool_calls": rows["tool_calls"], "tool_responses": rows["tool_responses"],
                      "tool_call_not_in_items": 0, "response_not_later": 0}) if tool_calls_hold(graph) else None
    if i == 2:
        held, turns = turns_hold(graph)
        return _held({"turns": turns, "turn_in_many_traces": 0, "turn_without_model_call": 0}) if held else None
    if i == 3:
        held, mcp = security_holds(graph)
        return _held({"mcp_security_calls": mcp, "mcp_call_without_tool_call": 0,
                      "security_rows": sum(rows[t] for t in SECURITY_TABLES), "security_event_unjoined": 0}) \
            if held else None
    raise ValueError(f"the identity graph section has four parts, not part {i}")


def merge_parts(result: CheckResult, parts: Sequence[CheckResult]) -> None:
    """Add the parts' counts and findings to the section, in the section's order."""
    for part in parts:
        result.counts.update(part.counts)
        for finding in part.findings:
            result.add(finding)


def check_identity_graph(conn: sqlite3.Connection, result: CheckResult, route: SessionRoute | None) -> None:
    """Every invariant of the identity graph on ``conn`` (the checks' read transaction), one
    after another; ``route`` is how the ledger was reached (None: ``--db``, no home)."""
    row, why = read_route(route)
    merge_parts(result, [part(conn) for part in session_parts(session_stopped(row))])
    check_route(conn, route, row, why, result)


__all__ = ["EVENT_TABLES", "EXAMPLES", "EXEMPT_EVENT_TYPES", "SECURITY_TABLES", "TURN_TABLES", "Part",
           "check_identity_graph", "check_model_items", "check_security_joins", "check_tool_calls", "check_turns",
           "held_part", "merge_parts", "session_parts"]
