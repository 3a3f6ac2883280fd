"""The tool usage table, counted from the identity graph's scan of tool_calls.

check's tool usage section (``sql_checks.check_tool_usage``) groups tool_calls by
(tool_name, origin, decision), with each group's row count and its mean duration rounded to a
tenth. In SQL that is one more pass over every row of the table, and tool_calls' rows are wide
(arguments, previews), where the identity graph's scan (``pages.graph.read_graph``) already
reads each of them once: it reads these four columns in the same pass, and the groups are
counted here from its arrays, with SQL's own rules:

* a NULL tool_name is left out (``WHERE tool_name IS NOT NULL``); a NULL origin or decision
  is a group of its own;
* the mean is SQLite's: the non-NULL durations added as doubles, divided by their number,
  NULL when there are none; it is exact here only while every partial sum stays below 2^53,
  so larger durations are left to SQL; the rounding is SQLite's own ``round(x, 1)``;
* the rows come in SQL's order: by count, largest first, then tool_name, and ties in the
  order GROUP BY gives them (tool_name, origin, decision, NULL first, bytes compared).

Where the scan did not read the columns as declared (a value of another kind), or a text is
not valid UTF-8 (the SQL then raises what it raises), ``usage_from_graph`` returns None and
the SQL runs.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from capsem_core.pages.graph import NULL, USAGE_COLUMNS, Graph

# Rows rounded by one statement (a VALUES list of this many rows).
_ROUND_BATCH = 500
_EXACT = 1 << 53

Cell = str | int | float | None


def usage_from_graph(graph: Graph | None, conn: sqlite3.Connection) -> list[list[Cell]] | None:
    """The tool usage rows (tool_name, origin, decision, count, avg_ms) as the SQL gives them,
    from ``graph``'s tool_calls columns; None when the graph cannot stand in for the SQL.
    ``conn``: a connection, for SQLite's own rounding."""
    if graph is None:
        return None
    table = graph.tables.get("tool_calls")
    if table is None or not set(USAGE_COLUMNS) <= table.columns.keys() or set(USAGE_COLUMNS) & table.odd:
        return None
    name, origin, decision, ms = (table.columns[c] for c in USAGE_COLUMNS)
    named = name != 0
    name, origin, decision, ms = name[named], origin[named], decision[named], ms[named]
    timed = ms != NULL
    if timed.any() and int(np.abs(ms[timed]).max()) * int(timed.sum()) >= _EXACT:
        return None
    codes = graph.codes["usage"]
    groups, inverse = _groups(np.stack((name, origin, decision), axis=1), len(codes) + 1)
    counts = np.bincount(inverse, minlength=len(groups))
    timed_n = np.bincount(inverse[timed], minlength=len(groups))
    sums = np.bincount(inverse[timed], weights=ms[timed].astype(np.float64), minlength=len(groups))
    texts: dict[int, str | None] = {0: None}
    try:
        for code in np.unique(groups):
            raw = codes.text(int(code))
            texts[int(code)] = None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    means = [float(s) / int(n) if n else None for s, n in zip(sums.tolist(), timed_n.tolist())]
    rows = [(texts[a], texts[b], texts[c], int(n), mean)
            for (a, b, c), n, mean in zip(groups.tolist(), counts.tolist(), means)]
    # GROUP BY's order first, then the ORDER BY (a stable sort keeps GROUP BY's order in ties).
    rows.sort(key=lambda r: (_binary(r[0]), _binary(r[1]), _binary(r[2])))
    rows.sort(key=lambda r: (-r[3], _binary(r[0])))
    rounded = _rounded(conn, [r[4] for r in rows])
    return [[a, b, c, n, avg] for (a, b, c, n, _mean), avg in zip(rows, rounded)]


def _groups(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``keys`` (three codes below ``size`` a row) and each row's group."""
    if size ** 3 < 1 << 62:
        flat = (keys[:, 0] * size + keys[:, 1]) * size + keys[:, 2]
        distinct, inverse = np.unique(flat, return_inverse=True)
        groups = np.stack((distinct // (size * size), distinct // size % size, distinct % size), axis=1)
        return groups, inverse.reshape(-1)
    groups, inverse = np.unique(keys, axis=0, return_inverse=True)
    return groups, inverse.reshape(-1)


def _binary(text: str | None) -> tuple[int, bytes]:
    """SQLite's BINARY order: NULL first, then texts by their UTF-8 bytes."""
    return (0, b"") if text is None else (1, text.encode("utf-8"))


def _rounded(conn: sqlite3.Connection, means: list[float | None]) -> list[Cell]:
    """``round(mean, 1)`` of each mean, by SQLite (whose rounding is not Python's)."""
    out: list[Cell] = []
    for at in range(0, len(means), _ROUND_BATCH):
        part = means[at:at + _ROUND_BATCH]
        out += [r[0] for r in conn.execute("VALUES " + ", ".join(["(round(?, 1))"] * len(part)), part)]
    return out


__all__ = ["Cell", "usage_from_graph"]
