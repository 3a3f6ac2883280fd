"""The ``capsem-ledger`` command line: one subcommand per concept module.

Each module that owns a command exposes ``add_<name>_arguments(parser)`` and
``run_<name>(args) -> int``; this module only wires them up and turns every failure into
one line on stderr, never a traceback: a LedgerError or an OSError is exit status 1, a
UsageError (arguments that contradict each other) is argparse's usage line and exit 2.
Every message goes through ``terminal.sanitize``: LedgerError text quotes paths and values.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from capsem_core.errors import LedgerError
from capsem_core.terminal import sanitize

# (subcommand, owning module, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("check", "capsem_core.check", "integrity report of one session's ledger"),
    ("list", "capsem_core.sessions", "recent sessions from main.db"),
    ("rollup", "capsem_core.sessions", "recompute a session's totals in main.db from its ledger"),
    ("sample", "capsem_core.sample", "write a realistic sample ledger or a whole CAPSEM_HOME"),
)


class UsageError(Exception):
    """Arguments that parse but contradict each other: the CLI prints the subcommand's
    usage line and this message, and exits 2 (argparse's status for usage errors)."""


def package_version() -> str:
    """The installed distribution's version; ``capsem_core.__version__`` (the one source
    the build reads it from) when the package runs from a tree that was never installed."""
    from importlib import metadata

    try:
        return metadata.version("capsem-core")
    except metadata.PackageNotFoundError:
        from capsem_core import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capsem-ledger", description="Inspect, verify and write Capsem session ledgers.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print the capsem-core version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name, help_text in COMMANDS:
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        getattr(module, f"add_{name}_arguments")(p)
        p.set_defaults(_run=getattr(module, f"run_{name}"), _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args))
    except UsageError as exc:
        args._parser.error(sanitize(exc))  # exits 2 after the usage line
        raise  # unreachable: error() exits
    except LedgerError as exc:
        print(f"capsem-ledger {args.command}: {sanitize(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # An I/O failure no module turned into a LedgerError still gets one line naming the file.
        where = f"{sanitize(exc.filename)}: " if exc.filename is not None else ""
        print(f"capsem-ledger {args.command}: {where}{sanitize(exc.strerror or exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"capsem-ledger {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
