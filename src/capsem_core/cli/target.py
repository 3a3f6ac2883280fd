"""Which ledger a command reads: ``SESSION`` (an id or a VM name, default the latest session
in main.db) or ``--db PATH`` (a session.db, or the directory holding it), never both.

The commands that read one ledger (``check``, ``body``, ``export``) share this rule; the
resolution itself is ``capsem_core.sessions.resolve_session``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from capsem_core import sessions
from capsem_core.check.opening import refuse_symlinks
from capsem_core.cli.errors import UsageError
from capsem_core.errors import LedgerError
from capsem_core.paths import SESSION_DB


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """``--db PATH``, worded once for every command that takes it."""
    parser.add_argument("--db", type=Path, metavar="PATH",
                        help="this session.db, or the ledger directory holding it (main.db is not read; not "
                             "together with SESSION)")


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


def ledger_db_path(session: str | None, db: Path | None) -> Path:
    """session.db of the ledger a command was pointed at, refusing symbolic links on the way
    (directory, session.db, session.bodies) before anything is opened. UsageError for both
    SESSION and --db; LedgerError (with the --db hint) for a session that resolves to none."""
    if db is not None:
        if session is not None:
            raise UsageError(f"give a SESSION or --db PATH, not both (got {session!r} and --db {db})")
        db_path = db_argument(db)
    else:
        try:
            db_path = sessions.resolve_session(session).db_path
        except LedgerError as exc:
            message = exc.detail if exc.path is None or str(exc.path) in exc.detail else str(exc)
            raise LedgerError(message + db_hint(session)) from None
    refuse_symlinks(Path(db_path), archive=True)
    return Path(db_path)


__all__ = ["add_db_argument", "db_argument", "db_hint", "ledger_db_path"]
