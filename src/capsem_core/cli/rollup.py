"""``capsem-ledger rollup``: recompute one session's totals in main.db from its ledger.

Resolves the session word, calls :func:`capsem_core.sessions.rollup`, and prints what was
written (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict
from typing import TextIO

from capsem_core.cli.arguments import session_argument
from capsem_core.cli.terminal import sanitize
from capsem_core.errors import LedgerError
from capsem_core.sessions import SessionRef, SessionTotals, home_layout, resolve_session, rollup


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", default=None, type=session_argument, metavar="SESSION",
                        help="session id or VM name (default: the latest session in main.db)")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON")


def _totals_lines(ref: SessionRef, totals: SessionTotals) -> Iterator[str]:
    yield f"Rolled up {sanitize(ref.label)} from {sanitize(ref.db_path)}"
    yield f"  requests     {totals.total_requests} ({totals.allowed_requests} allowed, {totals.denied_requests} denied)"
    yield f"  tokens       {totals.total_input_tokens} in + {totals.total_output_tokens} out"
    yield f"  cost         ${totals.total_estimated_cost:.4f}"
    mcp = "" if totals.mcp_calls is None else f" ({totals.mcp_calls} mcp, counted from the ledger)"
    yield f"  tool calls   {totals.total_tool_calls}{mcp}"
    yield f"  file events  {totals.total_file_events}"
    if totals.exec_count is not None:
        yield f"  exec events  {totals.exec_count}"
    if totals.audit_event_count is not None:
        yield f"  audit events {totals.audit_event_count}"


def run(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    layout = home_layout()
    ref = resolve_session(args.session, home=layout)
    if ref.id is None:
        raise LedgerError(f"persistent VM {ref.name} is not recorded in main.db, so it has no totals to roll up",
                          layout.main_db)
    totals = rollup(layout.main_db, ref.id, ref.db_path)
    if args.json:
        obj = asdict(totals)
        obj.update(name=ref.name, ledger=str(ref.db_path))
        json.dump(obj, out, indent=2)
        out.write("\n")
    else:
        out.write("\n".join(_totals_lines(ref, totals)) + "\n")
    return 0
