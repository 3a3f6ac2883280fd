"""Argument types the commands share, so one option means one rule everywhere: counts, and
which ledger a command reads (``SESSION`` or ``--db PATH``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from capsem_core.cli.errors import UsageError
from capsem_core.cli.terminal import sanitize
from capsem_core.errors import LedgerError
from capsem_core.outputs import STDOUT, check_output_name, names_stdout
from capsem_core.paths import SESSION_DB


# The largest count any option takes: SQLite's and numpy's int64, so no value the parser
# accepts overflows where it is used.
MAX_COUNT = 2**63 - 1
# Digits read at most: int() of a 100 KiB string of digits is quadratic work.
_MAX_DIGITS = 40


def counted(low: int = 0, high: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type of a whole number from ``low`` to ``high``: anything else is a usage
    error naming the range (exit 2), never an overflow where the number is used."""

    def parse(text: str) -> int:
        shown = text if len(text) <= 40 else text[:40] + "..."
        digits = text.strip().lstrip("+-")
        if not digits.isascii() or not digits.isdigit() or len(digits) > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"{shown!r} is not a whole number")
        value = int(text)
        if value < 0 <= low:
            raise argparse.ArgumentTypeError(f"{shown} is negative: a count is from {low:,} to {high:,}")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{shown} is out of range: from {low:,} to {high:,}")
        return value

    parse.__name__ = "whole number"
    return parse


whole_number = counted(0, MAX_COUNT)
whole_number.__doc__ = "A count given on the command line: a whole number from 0 to 2**63 - 1 (argparse type)."


def path_argument(text: str) -> Path:
    """A path given on the command line (argparse type): never empty (which Path would take
    for the current directory) and never holding NUL (which no path can)."""
    if text == "":
        raise argparse.ArgumentTypeError("an empty path (\"\" is not the current directory)")
    if "\x00" in text:
        raise argparse.ArgumentTypeError("a path holding a NUL character")
    return Path(text)


def _shown(text: str) -> str:
    return sanitize(text if len(text) <= 60 else text[:60] + "...")


def text_argument(text: str) -> str:
    """A text the ledger or main.db is searched for (an event id, a table, a status). Every
    text there is UTF-8, so bytes that are not (the shell hands them over as they are) are
    refused here, in one usage line, rather than deep in SQLite's parameter binding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"'{_shown(text)}' is not UTF-8 text") from None
    return text


def session_argument(text: str) -> str:
    """SESSION (argparse type): a word that may name a session directory, an id or a named
    VM's name. Anything else is a usage error said before any output (with a ``--db`` hint
    when the word is a ledger directory on disk)."""
    from capsem_core.sessions.home import session_word_problem   # a home's words: only when one is named

    problem = session_word_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"'{_shown(text)}' cannot name a session: {problem}{db_hint(text)}")
    return text


def output_argument(what: str, *, stdout: bool = False) -> Callable[[str], str]:
    """An argparse type of a path a command writes (``outputs.check_output_name``'s rule:
    never empty, never naming ``.``, ``..`` or ``/``); with ``stdout``, ``-`` is standard
    output, and so is a link to it (``/dev/stdout``: taken as ``-``, so a terminal there is
    treated as one). A bad name is a usage error, said before the ledger is read."""

    def parse(text: str) -> str:
        if stdout and names_stdout(text):
            return STDOUT
        try:
            check_output_name(text, what)
        except LedgerError as exc:
            where = "" if exc.path is None else f"{_shown(str(exc.path))}: "
            raise argparse.ArgumentTypeError(where + exc.detail) from None
        return text

    parse.__name__ = what
    return parse


def db_argument(path: Path) -> Path:
    """``--db`` names session.db, or the ledger directory holding it."""
    try:
        return path / SESSION_DB if path.is_dir() else path
    except OSError:  # e.g. a name too long: the open that follows names the problem
        return path


def db_hint(word: str | None) -> str:
    """"; did you mean --db WORD?" when a SESSION word that resolved to nothing is a ledger
    directory (or a session.db) on disk, else ""."""
    if not word:
        return ""
    p = Path(word)
    try:
        if (p / SESSION_DB).is_file() or (p.name == SESSION_DB and p.is_file()):
            return f"; did you mean --db {word}?"
    except (OSError, ValueError):  # a name too long for a path, or holding NUL: no ledger there
        pass
    return ""


def add_ledger_target(parser: argparse.ArgumentParser) -> None:
    """The ``SESSION`` / ``--db PATH`` pair of a command that reads one ledger."""
    parser.add_argument("session", nargs="?", metavar="SESSION", type=session_argument,
                        help="session id, or a named VM's name (default: the latest session in main.db)")
    parser.add_argument("--db", type=path_argument, metavar="PATH",
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
    from capsem_core.sessions.resolve import resolve_session   # main.db's reader: only when a home is read

    try:
        return resolve_session(args.session).db_path
    except LedgerError as exc:
        hint = db_hint(args.session)
        if not hint:
            raise
        raise type(exc)(exc.detail + hint, exc.path) from None


__all__ = ["MAX_COUNT", "add_ledger_target", "counted", "db_argument", "db_hint", "ledger_target", "output_argument",
           "path_argument", "session_argument", "whole_number"]
