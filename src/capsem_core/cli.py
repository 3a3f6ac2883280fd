"""The ``capsem-ledger`` command line: one subcommand per concept module.

Each module that owns a command exposes ``add_<name>_arguments(parser)`` and
``run_<name>(args) -> int``; this module only wires them up and turns every
LedgerError into a one-line message and exit status 1 (argparse uses 2 for usage).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from capsem_core.format import LedgerError

# (subcommand, owning module, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("check", "capsem_core.check", "integrity report of one session's ledger"),
    ("list", "capsem_core.sessions", "recent sessions from main.db"),
    ("rollup", "capsem_core.sessions", "recompute a session's totals in main.db from its ledger"),
    ("sample", "capsem_core.sample", "write a realistic sample ledger or a whole CAPSEM_HOME"),
)


# Commands that write: SIGTERM raises Terminated in them, so the writers' exit paths run (and
# leave a sound ledger) exactly as for Ctrl-C, instead of the process dying mid-record.
WRITING_COMMANDS = frozenset(("sample", "rollup"))


class Terminated(BaseException):
    """SIGTERM, raised as an exception in a writing command (a BaseException, like Ctrl-C's)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capsem-ledger", description="Inspect, verify and write Capsem session ledgers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name, help_text in COMMANDS:
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        getattr(module, f"add_{name}_arguments")(p)
        p.set_defaults(_run=getattr(module, f"run_{name}"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in WRITING_COMMANDS:
            signal.signal(signal.SIGTERM, _raise_terminated)
        return int(args._run(args))
    except LedgerError as exc:
        print(f"capsem-ledger {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"capsem-ledger {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"capsem-ledger {args.command}: terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
