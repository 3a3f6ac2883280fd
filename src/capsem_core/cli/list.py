"""``capsem-ledger list``: recent sessions from main.db, as Capsem's doctor lists them.

Parses the filters, asks :func:`capsem_core.sessions.list_sessions`, and prints the doctor's
table (or ``--json``) through the session list formats.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TextIO

from capsem_core.cli.arguments import text_argument, whole_number
from capsem_core.cli.terminal import colour_wanted, sanitize
from capsem_core.cli.sessions import list_lines, listed_json
from capsem_core.sessions import ListFilter, home_layout, list_sessions




def _cost(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite amount of at least 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=whole_number, default=10, metavar="N", help="show at most N sessions (default 10)")
    parser.add_argument("--with-model", action="store_true", help="only sessions with AI model calls")
    parser.add_argument("--with-db", action="store_true",
                        help="only sessions whose ledger is still on disk (applied before -n)")
    parser.add_argument("--with-net", action="store_true", help="only sessions with network events")
    parser.add_argument("--with-tools", action="store_true", help="only sessions with tool calls")
    parser.add_argument("--min-cost", type=_cost, default=0.0, metavar="X",
                        help="only sessions that cost at least X dollars")
    parser.add_argument("--status", default=None, metavar="STATUS", type=text_argument,
                        help="only sessions with this status")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    layout = home_layout()
    if not layout.main_db.exists():
        print(f"No main.db found at {sanitize(layout.main_db)}", file=err)
        return 1
    flt = ListFilter(limit=args.n, with_model=args.with_model, with_db=args.with_db, with_net=args.with_net,
                     with_tools=args.with_tools, min_cost=args.min_cost, status=args.status)
    items = list_sessions(flt, home=layout)
    if args.json:
        json.dump([listed_json(i) for i in items], out, indent=2)
        out.write("\n")
        return 0
    if not items:
        print("No sessions found", file=out)
        return 0
    out.write("\n".join(list_lines(items, colour_wanted(out))) + "\n")
    return 0
