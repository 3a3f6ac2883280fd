"""Argument types the commands share, so one option means one rule everywhere: counts, and
which ledger a command reads (``SESSION`` or ``--db PATH``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from capsem_core import sessions
from capsem_core.cli.errors import UsageError
from capsem_core.errors import LedgerError
from capsem_core.paths import SESSION_DB


def whole_number(text: str) -> int:
    """A count given on the command line: a whole number, zero or more (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def db_argument(path: Path) -> Path:
    """``--db`` names session.db, or the ledger directory holding it."""
    return path / SESSION_DB if path.is_dir() else path


def db_hint(word: str | None) -> str:
    """"; did you mean --db WORD?" when a SESSION word that resolved to nothing is a ledger
    directory (or a session.db) on disk, else ""."""
    if not word:
        return ""
    p = Path(word)
    if (p / SESSION_DB).is_file() or (p.name == SESSION_DB and p.is_file()):
        return f"; did you mean --db {word}?"
    return ""


def add_ledger_target(parser: argparse.ArgumentParser) -> None:
    """The ``SESSION`` / ``--db PATH`` pair of a command that reads one ledger."""
    parser.add_argument("session", nargs="?", metavar="SESSION",
                        help="session id, or a named VM's name (default: the latest session in main.db)")
    parser.add_argument("--db", type=Path, metavar="PATH",
                        help="read this session.db, or the ledger directory holding it, directly (main.db is not "
                             "read; not together with SESSION)")


def ledger_target(args: argparse.Namespace) -> Path:
    """The session.db a command reads: ``--db PATH``, else SESSION (an id or a VM name) or the
    latest session, found by the one resolver (``capsem_core.sessions.resolve_session``).

    Raises UsageError for both at once, LedgerError (with a ``--db`` hint when the word is a
    ledger directory) when the session cannot be found."""
    if args.db is not None:
        if args.session is not None:
            raise UsageError(f"give a SESSION or --db PATH, not both (got {args.session!r} and --db {args.db})")
        return db_argument(args.db)
    try:
        return sessions.resolve_session(args.session).db_path
    except LedgerError as exc:
        hint = db_hint(args.session)
        if not hint:
            raise
        raise type(exc)(exc.detail + hint, exc.path) from None


__all__ = ["add_ledger_target", "db_argument", "db_hint", "ledger_target", "whole_number"]
