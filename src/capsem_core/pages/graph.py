"""The identity graph proved from session.db's own pages, where it holds.

Each of the four parts of ``identity.session_parts`` is one SQL pass per table. Here the
columns those passes join on are read once, natively, from the database file the page check
has mapped (``PageFile.records``: no SQL, no object per row), texts as dense codes (equal
codes are byte-equal texts) and event ids, Capsem's 12 lower-case hex digits, as their 48-bit
values (no table to code them in: they are the most numerous texts, and the security joins on
them are decided on sorted arrays), and every invariant of a part is decided on the arrays
with numpy, with SQL's own NULL rules. A part whose invariants all hold gets the counts its SQL
would report and no finding. A part with any break, or one that reads a column the scan
could not read as the schema declares it (a value of another kind, a table that is not a
plain rowid table, a collation, a damaged tree), is handed to its SQL, which words the
findings with their examples. So the section always reads exactly as the SQL writes it; the
arrays only spare a sound ledger the SQL.

It runs only where the check's snapshot is the database file itself (``Snapshot.pages``):
then the file's pages are the snapshot's. ``check/identity.py`` turns what holds into the
section's parts.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from capsem_core._native import _pages
from capsem_core.pages import tables as page_tables
from capsem_core.pages.index import Alongside
from capsem_core.schema.joins import EVENT_TABLES, SECURITY_TABLES, TURN_TABLES

Array = npt.NDArray[np.int64]
NULL = _pages.NULL_VALUE
# Below this size of session.db the section's SQL is as fast as the scan and its set-up (the
# two cross near 12 MiB on the development machine: 9.1 against 12.7 ms at 4 MiB, 24.2
# against 23.1 ms at 24 MiB), so check runs the SQL.
MIN_BYTES = 16 << 20
# The columns each join reads, by the domain their codes share (codes compare only within
# one domain): tool call ids, and the short names (traces, turns, kinds, types). Event ids are
# read as their values (HEX); an event id of another form is a value of another kind. The tool
# usage's texts are only counted, never joined: a domain of their own, so that they do not
# widen the arrays the joins size by a domain's count.
TEXT_DOMAINS = {"call_id": "call", "trace_id": "name", "turn_id": "name", "kind": "name", "event_type": "name",
                "tool_name": "usage", "origin": "usage", "decision": "usage"}
HEX_COLUMNS = ("event_id",)
INTEGER_COLUMNS = ("id", "model_call_id", "duration_ms")
# The tool usage section's columns (``pages.usage``): read in the same pass over tool_calls
# where the table declares them, so that section needs no SQL pass of its own.
USAGE_COLUMNS = ("tool_name", "origin", "decision", "duration_ms")
_SPECIFIC: dict[str, tuple[str, ...]] = {
    "model_items": ("model_call_id", "kind", "call_id"),
    "model_calls": ("id",),
    "tool_calls": ("model_call_id", "call_id"),
    "tool_responses": ("model_call_id", "call_id"),
    **{t: ("event_type",) for t in SECURITY_TABLES},
}
_EVENT_ID_TABLES = frozenset(EVENT_TABLES.values()) | frozenset(SECURITY_TABLES) | {"tool_calls"}


def wanted() -> dict[str, tuple[str, ...]]:
    """Per table, the columns the four parts join on."""
    out: dict[str, tuple[str, ...]] = {}
    for table in dict.fromkeys((*TURN_TABLES, *sorted(_EVENT_ID_TABLES), *_SPECIFIC)):   # a fixed order
        names = list(_SPECIFIC.get(table, ()))
        if table in TURN_TABLES:
            names += ["trace_id", "turn_id"]
        if table in _EVENT_ID_TABLES:
            names.append("event_id")
        out[table] = tuple(dict.fromkeys(names))
    return out


@dataclass(slots=True)
class Table:
    """One table's scanned columns (name -> int64 array), and the columns the scan could not
    read as declared (their values of another kind). ``turns``: for a table whose traces and
    turns only the turn invariant reads, those two columns thinned to the rows where their
    pair changes (``_pages.runs``: (turn, trace)), kept instead of ``columns["turn_id"]`` and
    ``columns["trace_id"]`` (a million-row table's two columns become a few thousand values)."""

    rows: int
    columns: dict[str, Array]
    odd: frozenset[str]
    turns: tuple[Array, Array] | None = None


class Graph:
    """The scanned columns of every table the parts read, and the codes they share."""

    def __init__(self) -> None:
        seed = int.from_bytes(os.urandom(8), "little")
        self.codes = {domain: _pages.Codes(seed ^ i) for i, domain in enumerate(("call", "name", "usage"))}
        self.tables: dict[str, Table] = {}

    def code(self, domain: str, text: str) -> int:
        """The code of ``text`` in ``domain``; 0 when no scanned row holds it."""
        return int(self.codes[domain].find(text))

    def count(self, domain: str) -> int:
        """The distinct texts ``domain`` has coded (its largest code)."""
        return len(self.codes[domain])


BLOBS = "event_body_blobs"
# The turn tables whose trace_id and turn_id other invariants read row by row (the tool
# ledger's and the model exchanges'); every other's are kept as runs (``Table.turns``).
ROW_TURNS = frozenset({"model_items", "model_calls", "tool_calls", "tool_responses"})


def _turn_runs(columns: dict[str, Array]) -> dict[str, Array]:
    """A turn table's columns with trace_id and turn_id thinned to their runs."""
    if "turn_id" not in columns or "trace_id" not in columns:
        return columns
    out = dict(columns)
    out["turn_id"], out["trace_id"] = _pages.runs(out.pop("turn_id"), out.pop("trace_id"))
    return out


def _table(rows: int, columns: dict[str, Array], odd: frozenset[str], *, thinned: bool) -> Table:
    """A scanned table with its traces and turns kept as runs (``thinned``: they are already)."""
    turns = None
    if columns.keys() >= {"turn_id", "trace_id"}:
        turn, trace = columns.pop("turn_id"), columns.pop("trace_id")
        turns = (turn, trace) if thinned else _pages.runs(turn, trace)
    return Table(rows, columns, odd, turns)


def blobs_alongside(graph: Graph) -> Alongside:
    """What the body index's pass over event_body_blobs reads for ``graph`` (its traces and
    turns, kept as runs), in codes of the pass's own, so ``read_graph`` may scan the other
    tables at once; ``join_blobs`` brings them into the graph's codes once both have ended."""
    seed = int.from_bytes(os.urandom(8), "little")
    domains = {TEXT_DOMAINS[name] for name in wanted().get(BLOBS, ())}
    codes = {domain: _pages.Codes(seed ^ i) for i, domain in enumerate(sorted(domains))}
    return Alongside({name: codes[TEXT_DOMAINS[name]] for name in wanted().get(BLOBS, ())}, keep=_turn_runs)


def read_graph(pages: _pages.PageFile, conn: sqlite3.Connection, graph: Graph | None = None,
               blobs: Alongside | None = None) -> Graph | None:
    """Scan every table the parts read (``conn``: a connection of the snapshot, for the
    schema) into ``graph`` (default a new one). With ``blobs`` (``blobs_alongside(graph)``),
    event_body_blobs is left to the body index's pass, which may run at the same time:
    ``join_blobs`` adds it once both have ended. None when the file cannot serve them (then
    every part runs its SQL)."""
    if not page_tables.utf8(conn):
        return None
    graph = graph if graph is not None else Graph()
    tables = [(table, names) for table, names in wanted().items() if table != BLOBS or blobs is None]
    return graph if _scan_tables(pages, conn, graph, _roots(conn), tables) else None


def join_blobs(pages: _pages.PageFile, conn: sqlite3.Connection, graph: Graph, blobs: Alongside) -> Graph | None:
    """``graph`` (read by ``read_graph`` with ``blobs``) with event_body_blobs' columns: the
    body index's pass's, their codes adopted into the graph's (the pass must have ended), or,
    where the pass did not read them, scanned here. None when neither can serve them."""
    names = wanted().get(BLOBS)
    if names is None:   # the parts read none of its columns
        return graph
    if blobs.rows is None or set(blobs.columns) != set(names):
        return graph if _scan_tables(pages, conn, graph, _roots(conn), [(BLOBS, names)]) else None
    columns = {}
    adopted: dict[int, Array | None] = {}
    for name, values in blobs.columns.items():
        theirs = blobs.codes[name]
        if id(theirs) not in adopted:
            adopted[id(theirs)] = graph.codes[TEXT_DOMAINS[name]].adopt(theirs)
        mapped = adopted[id(theirs)]
        if mapped is None:
            return None
        columns[name] = mapped[values]
    graph.tables[BLOBS] = _table(blobs.rows, columns, blobs.odd, thinned=blobs.keep is _turn_runs)
    return graph


def _roots(conn: sqlite3.Connection) -> dict[str, object]:
    return dict(conn.execute("SELECT name, rootpage FROM sqlite_schema WHERE type = 'table'").fetchall())


def _scan_tables(pages: _pages.PageFile, conn: sqlite3.Connection, graph: Graph, roots: dict[str, object],
                 tables: Sequence[tuple[str, tuple[str, ...]]]) -> bool:
    """Each table's columns scanned into ``graph``, the tables in one pass (``records_of``:
    together in file order, so the pass follows a read-ahead of the file as one reader);
    False when the file cannot serve them."""
    trees = []
    chosen = []
    for table, names in tables:
        root = roots.get(table)
        columns = _record_columns(conn, table, names)
        if not isinstance(root, int) or not 0 < root <= 0xFFFFFFFF or columns is None:
            return False
        trees.append((root, [(cid, _kind(graph, name)) for cid, name in columns]))
        chosen.append(columns)
    for (table, _names), columns, scanned in zip(tables, chosen, pages.records_of(trees)):
        if scanned.status != "ok":
            return False
        read = {name: values for (_c, name), values in zip(columns, scanned.values)}
        odd = frozenset(name for (_c, name), odd in zip(columns, scanned.odd) if odd)
        rows = int(scanned.rows)
        graph.tables[table] = Table(rows, read, odd) if table in ROW_TURNS else _table(rows, read, odd, thinned=False)
    return True


def _record_columns(conn: sqlite3.Connection, table: str, names: tuple[str, ...]) -> list[tuple[int, str]] | None:
    """The record columns the scan of ``table`` reads: the joins' ``names``, and for tool_calls
    the tool usage's too where it declares them as Capsem does (else those are left to SQL)."""
    if table == "tool_calls":
        found = page_tables.record_columns(conn, table, (*names, *USAGE_COLUMNS), INTEGER_COLUMNS)
        if found is not None:
            return found
    return page_tables.record_columns(conn, table, names, INTEGER_COLUMNS)


def _kind(graph: Graph, name: str) -> _pages.Codes | str | None:
    """How the scan reads column ``name``: its domain's codes, an event id's value, or an integer."""
    if name in TEXT_DOMAINS:
        return graph.codes[TEXT_DOMAINS[name]]
    return _pages.HEX if name in HEX_COLUMNS else None


# --- the parts' invariants on the arrays: True when no row breaks them -----------------------

def clean(graph: Graph, uses: Mapping[str, Sequence[str]]) -> bool:
    """Whether every column ``uses`` names was read as declared (no value of another kind)."""
    return all(not set(names) & graph.tables[t].odd for t, names in uses.items())


def pair_keys(call: Array, low: Array) -> Array:
    """One int64 per (call code, 32-bit value) pair."""
    return (call << 32) | low


def member(values: Array, pool: Array) -> npt.NDArray[np.bool_]:
    """Which ``values`` are in ``pool``: through a bitmap when the pool's values are small
    (row ids, codes), else a sorted search."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    low, high = int(pool.min()), int(pool.max())
    if low >= 0 and high < 8 * (len(pool) + len(values)) + (1 << 16):
        bitmap = np.zeros(high + 2, dtype=bool)
        bitmap[pool] = True
        return bitmap[np.clip(values, -1, high + 1)]   # -1 and high + 1 index False entries
    pool = np.unique(pool)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    found: npt.NDArray[np.bool_] = pool[at] == values
    return found


def _mapping(keys: Array, values: Array, size: int) -> Array | None:
    """``out[key] = value`` over dense codes ``keys`` (< size), when each key has one value
    (NULL where none); None when some key has two."""
    out = np.full(size, NULL, dtype=np.int64)
    out[keys] = values
    return out if bool((out[keys] == values).all()) else None


def pairs_in(call: Array, value: Array, pool_call: Array, pool_value: Array, size: int) -> npt.NDArray[np.bool_]:
    """Which (call, value) pairs (calls non-NULL codes < size, values 32-bit) are among the
    pool's pairs."""
    mapped = _mapping(pool_call, pool_value, size)
    if mapped is not None:
        found: npt.NDArray[np.bool_] = mapped[call] == value
        return found
    return member(pair_keys(call, value), pair_keys(pool_call, pool_value))


def _fits32(values: Array) -> bool:
    return bool(((values >= 0) & (values < 1 << 32)).all())


def _pairs(columns: dict[str, Array], chosen: npt.NDArray[np.bool_] | None = None) -> tuple[Array, Array]:
    """The (call code, model_call_id) pairs of rows naming both with a 32-bit id."""
    call, mcid = columns["call_id"], columns["model_call_id"]
    keep = (call != 0) & (mcid >= 0) & (mcid < 1 << 32)
    if chosen is not None:
        keep &= chosen
    return call[keep], mcid[keep]


def model_items_hold(graph: Graph) -> bool:
    """Invariants 1 and 2 (``identity.check_model_items``)."""
    if not clean(graph, {"model_items": ("model_call_id", "kind", "call_id", "trace_id"),
                          "model_calls": ("id", "trace_id"), "tool_calls": ("model_call_id", "call_id"),
                          "tool_responses": ("model_call_id", "call_id")}):
        return False
    items, calls = graph.tables["model_items"].columns, graph.tables["model_calls"].columns
    mcid = items["model_call_id"]
    # NOT IN: a NULL names no call unless model_calls is empty (then NOT IN is true).
    named = mcid != NULL
    if not member(mcid[named], calls["id"]).all() or (not named.all() and not len(calls["id"])):
        return False
    size = graph.count("call") + 1
    for kind, table in (("tool_call", "tool_calls"), ("tool_response", "tool_responses")):
        code = graph.code("name", kind)
        if not code:
            continue
        chosen = items["kind"] == code
        call, item_mcid = items["call_id"][chosen], mcid[chosen]
        known = (call != 0) & (item_mcid != NULL)
        if not _fits32(item_mcid[known]):
            return False
        found = np.zeros(len(call), dtype=bool)
        found[known] = pairs_in(call[known], item_mcid[known], *_pairs(graph.tables[table].columns), size)
        missing = ~found
        if kind == "tool_call" and missing.any():
            # Counted only once a later exchange of the item's trace exists.
            later = _latest_exchange(graph)[items["trace_id"][chosen][missing]]
            if ((later > item_mcid[missing]) & (item_mcid[missing] != NULL)).any():
                return False
        elif missing.any():
            return False
    return True


def _latest_exchange(graph: Graph) -> Array:
    """Per trace code, the largest model_calls id of that trace (NULL where none; index 0,
    a NULL trace, has none)."""
    calls = graph.tables["model_calls"].columns
    latest = np.full(graph.count("name") + 1, NULL, dtype=np.int64)
    traced = calls["trace_id"] != 0
    np.maximum.at(latest, calls["trace_id"][traced], calls["id"][traced])
    latest[0] = NULL
    return latest


def tool_calls_hold(graph: Graph) -> bool:
    """Invariants 3 and 4 (``identity.check_tool_calls``)."""
    if not clean(graph, {"model_items": ("model_call_id", "kind", "call_id"),
                          "tool_calls": ("model_call_id", "call_id", "trace_id"),
                          "tool_responses": ("model_call_id", "call_id", "trace_id")}):
        return False
    items, calls = graph.tables["model_items"].columns, graph.tables["tool_calls"].columns
    responses = graph.tables["tool_responses"].columns
    size = graph.count("call") + 1
    emitted = calls["model_call_id"] != NULL
    if emitted.any():
        call, mcid = calls["call_id"][emitted], calls["model_call_id"][emitted]
        if (call == 0).any() or not _fits32(mcid):
            return False
        code = graph.code("name", "tool_call")
        if not code or not pairs_in(call, mcid, *_pairs(items, items["kind"] == code), size).all():
            return False
    # A response breaks when a call of its call_id and trace (IS: NULL matches NULL) was
    # emitted by the same or a later exchange.
    by = (calls["call_id"] != 0) & emitted
    asked = (responses["call_id"] != 0) & (responses["model_call_id"] != NULL)
    if not by.any() or not asked.any():
        return True
    call, trace, mcid = calls["call_id"][by], calls["trace_id"][by], calls["model_call_id"][by]
    wanted_call, wanted_trace = responses["call_id"][asked], responses["trace_id"][asked]
    trace_of = _mapping(call, trace, size)
    if trace_of is not None:   # one trace per call_id: group by call alone
        latest = np.full(size, NULL, dtype=np.int64)
        np.maximum.at(latest, call, mcid)
        same = trace_of[wanted_call] == wanted_trace
        return not (same & (latest[wanted_call] >= responses["model_call_id"][asked])).any()
    keys = pair_keys(call, trace)
    order = np.argsort(keys, kind="stable")
    keys, ordered = keys[order], mcid[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    unique, most = keys[starts], np.maximum.reduceat(ordered, starts)
    wanted_keys = pair_keys(wanted_call, wanted_trace)
    at = np.minimum(np.searchsorted(unique, wanted_keys), len(unique) - 1)
    same = unique[at] == wanted_keys
    return not (same & (most[at] >= responses["model_call_id"][asked])).any()


def turns_hold(graph: Graph) -> tuple[bool, int]:
    """Invariant 5 (``identity.check_turns``): (no turn in two traces and none without a
    model exchange, the number of turns)."""
    if not clean(graph, {t: ("trace_id", "turn_id") for t in TURN_TABLES}):
        return False, 0
    size = graph.count("name") + 1
    trace_of = np.zeros(size, dtype=np.int64)
    present = np.zeros(size, dtype=bool)
    pairs = []
    for table in TURN_TABLES:
        scanned = graph.tables[table]
        # Rows come in runs of one turn and trace: each run's first is enough.
        turn, trace = scanned.turns if scanned.turns is not None else _pages.runs(scanned.columns["turn_id"],
                                                                                  scanned.columns["trace_id"])
        present[turn] = True
        both = (turn != 0) & (trace != 0)
        turn, trace = turn[both], trace[both]
        trace_of[turn] = trace   # any one of each turn's traces
        pairs.append((turn, trace))
    present[0] = False
    if any((trace_of[turn] != trace).any() for turn, trace in pairs):
        return False, 0
    exchange = np.zeros(size, dtype=bool)
    exchange[graph.tables["model_calls"].columns["turn_id"]] = True
    return not (present & ~exchange).any(), int(present.sum())


def security_holds(graph: Graph) -> tuple[bool, int]:
    """Invariants 6 and 7 (``identity.check_security_joins``): (no break, the rule table's
    MCP tools/call rows). A row joins when its event_type's table holds its event_id (the rule
    table's MCP calls: tool_calls, invariant 6), with ``NOT (event_id IN (SELECT event_id FROM
    table))``'s NULL rules: a NULL event_id breaks only against an empty table, an unknown one
    only against a table holding no NULL."""
    targets = sorted(set(EVENT_TABLES.values()))
    if not clean(graph, {**{t: ("event_id",) for t in targets},
                          **{t: ("event_id", "event_type") for t in SECURITY_TABLES}}):
        return False, 0
    target = np.full(graph.count("name") + 1, -1, dtype=np.int8)   # event_type code -> target
    for event_type, table in EVENT_TABLES.items():
        code = graph.code("name", event_type)
        if code:
            target[code] = targets.index(table)
    tables = [graph.tables[t] for t in targets]
    empty = np.array([t.rows == 0 for t in tables])
    # Each row as one key, its target table's index above its event id (a 48-bit value), so
    # one sorted merge with the targets' ids keyed alike decides every row.
    parts, named = [], np.zeros(len(targets), dtype=np.int64)
    for source in SECURITY_TABLES:
        columns = graph.tables[source].columns
        each = target[columns["event_type"]]
        joins = each >= 0
        each, ids = each[joins], columns["event_id"][joins]
        null = ids == NULL
        if null.any():
            if empty[each[null]].any():
                return False, 0
            each, ids = each[~null], ids[~null]
        named += np.bincount(each, minlength=len(targets))
        parts.append(np.bitwise_or(each.astype(np.int64) << 48, ids))
    used = [int(i) for i in np.flatnonzero(named)]
    # A target holding a NULL event_id: NOT IN is never true of it, so its rows are left out.
    nulls = [i for i in used if tables[i].rows and int(tables[i].columns["event_id"].min()) == NULL]
    keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if nulls:
        keys = keys[~np.isin(keys >> 48, nulls)]
    keys.sort()
    held = [i for i in used if i not in nulls]
    pool = np.empty(sum(tables[i].rows for i in held), dtype=np.int64)
    at = 0
    for i in held:
        values = tables[i].columns["event_id"]
        np.bitwise_or(values, i << 48, out=pool[at:at + len(values)])
        at += len(values)
    pool.sort()
    mcp_code = graph.code("name", "mcp.tool_call")
    mcp = int((graph.tables["security_rule_events"].columns["event_type"] == mcp_code).sum()) if mcp_code else 0
    return _pages.missing_sorted(pool, keys) == 0, mcp


def worth_scanning(pages: _pages.PageFile | None) -> bool:
    """Whether check decides the section from ``pages`` (the mapped snapshot, or None): only
    from MIN_BYTES up, where the scan costs less than the SQL it spares."""
    return pages is not None and pages.size >= MIN_BYTES


__all__ = ["BLOBS", "MIN_BYTES", "USAGE_COLUMNS", "Graph", "Table", "blobs_alongside", "join_blobs", "clean", "member",
           "model_items_hold", "pair_keys", "pairs_in", "read_graph", "security_holds", "tool_calls_hold", "turns_hold",
           "wanted", "worth_scanning"]
