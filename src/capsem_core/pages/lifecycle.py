"""The tool lifecycle's counts, and how they are taken from the identity graph's scanned columns.

The tool lifecycle (``sql_checks.tool_lifecycle_counts``) joins tool_calls and tool_responses
on (call_id, trace_id) and both on model_calls' id: four index-backed SQL passes, about half
a second on a million-body ledger. The identity graph's scan (``pages.graph.read_graph``)
has already read each of those columns into arrays, so where it ran the four counts are
taken from them with SQL's own rules: a NULL call_id answers nothing, ``trace_id IS``
matches NULL with NULL, a NULL model_call_id names nothing. Where a column holds a value of
another kind than declared the arrays do not say what SQL would, and the SQL runs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from capsem_core.pages.graph import NULL, Array, Graph, clean, member, pairs_in


class Lifecycle(NamedTuple):
    """The tool lifecycle's counts: calls no response answers, responses answering no call
    (both within one trace), and calls and responses naming a model call model_calls does
    not record (None when the ledger has no model_calls)."""

    unanswered: int
    orphaned: int
    missing_call: int | None
    missing_resp: int | None


# The columns the four counts read, per table (a bench's baseline scans exactly these).
USES = {"tool_calls": ("call_id", "trace_id", "model_call_id"),
        "tool_responses": ("call_id", "trace_id", "model_call_id"), "model_calls": ("id",)}


def _answered(graph: Graph, rows: dict[str, Array], others: dict[str, Array]) -> npt.NDArray[np.bool_]:
    """Which ``rows`` share a non-NULL call_id and the trace (IS) of some row of ``others``."""
    named = others["call_id"] != 0
    found: npt.NDArray[np.bool_] = rows["call_id"] != 0
    found[found] = pairs_in(rows["call_id"][found], rows["trace_id"][found], others["call_id"][named],
                            others["trace_id"][named], graph.count("call") + 1)
    return found


def _unrecorded(rows: dict[str, Array], ids: Array) -> int:
    """Rows naming a model_call_id that is not among ``ids``."""
    mcid = rows["model_call_id"]
    named = mcid != NULL
    return int((named & ~member(mcid, ids)).sum())


def lifecycle_from_graph(graph: Graph | None) -> Lifecycle | None:
    """The tool lifecycle's counts from ``graph`` (None when there is no graph or it read a
    column the counts use as another kind than declared: then the SQL must count)."""
    if graph is None or not clean(graph, USES):
        return None
    calls, responses = graph.tables["tool_calls"].columns, graph.tables["tool_responses"].columns
    ids = graph.tables["model_calls"].columns["id"]
    return Lifecycle(unanswered=int((~_answered(graph, calls, responses)).sum()),
                     orphaned=int((~_answered(graph, responses, calls)).sum()),
                     missing_call=_unrecorded(calls, ids), missing_resp=_unrecorded(responses, ids))


__all__ = ["USES", "Lifecycle", "lifecycle_from_graph"]
