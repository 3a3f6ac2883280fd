"""``capsem-ledger check``: which ledger to look at, the report, and the session lists.

The command resolves its target (``--db PATH``, a SESSION id or name, or the latest session
in main.db), refuses a ledger reached through a symbolic link before anything is opened,
runs ``capsem_core.check.check_ledger`` (with a progress bar for --verify-bodies on a
terminal) and prints the report as text or JSON. ``--list`` prints main.db's recent
sessions instead; the text report starts with them too. Exit status: the report's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from capsem_core.cli import fleet, startup
from capsem_core.cli.arguments import db_argument, db_hint, path_argument, session_argument, whole_number
from capsem_core.cli.errors import UsageError
from capsem_core.cli.terminal import colour_wanted
from capsem_core.errors import LedgerError

if TYPE_CHECKING:
    from capsem_core.check.incremental import VerifyOptions
    from capsem_core.check.route import SessionRoute

RECENT_SESSIONS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", metavar="SESSION", type=session_argument,
                        help="session id, or a named VM's name (default: the latest session in main.db)")
    parser.add_argument("-n", "--rows", type=whole_number, default=5, metavar="N",
                        help="preview rows per table (default 5)")
    parser.add_argument("--list", action="store_true",
                        help="list recent sessions from main.db and exit (takes precedence over the other options)")
    parser.add_argument("--db", type=path_argument, metavar="PATH",
                        help="check this session.db, or the ledger directory holding it, directly (main.db is not "
                             "read; not together with SESSION)")
    parser.add_argument("--verify-bodies", action="store_true",
                        help="also read every archived body back through its hash (skipped, and said so, when "
                             "the index and the archive disagree)")
    parser.add_argument("--incremental", action="store_true",
                        help="with --verify-bodies: read back only blocks that are new, grew or are not yet "
                             "recorded as verified, and prove every other block unchanged by one hash of its "
                             "on-disk bytes (the record lives in the user cache directory)")
    parser.add_argument("--max-age", type=_duration, metavar="DURATION",
                        help="with --incremental: read back fully every block verified longer ago than this "
                             "(e.g. 7d, 12h, 30m)")
    parser.add_argument("--subset", metavar="n/t|x%",
                        help="with --verify-bodies: read back only the n-th of t slices of the blocks (t runs "
                             "cover them all) or a random x%% of them")
    parser.add_argument("--subset-seed", type=whole_number, metavar="N",
                        help="the seed of a random --subset x%% (default: drawn, and reported)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with the exact ledger values instead of the text report "
                             "(whose ledger strings are escaped for the terminal)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too, not only on damage (the identity graph's warnings, "
                             "main.db totals that differ from the ledger's, ...)")
    fleet.add_arguments(parser)  # --all and its options (cli/fleet.py)


def run(args: argparse.Namespace) -> int:
    # What a check needs loads here, not when the parser is built (``--help`` needs none of it).
    from capsem_core import sessions
    from capsem_core.check import check_ledger, report_to_json
    from capsem_core.check.route import SessionRoute
    from capsem_core.cli.check_text import render_text
    from capsem_core.cli.progress import VerifyProgressBar
    from capsem_core.snapshot import refuse_symlinks

    startup.loaded()
    out_colour = not args.json and colour_wanted(sys.stdout)
    if args.list:
        return _list_sessions(args.json, out_colour)
    if args.all:
        return fleet.run(args, options=_verify_options(args))
    fleet.refuse_fleet_options(args)
    # Before anything is printed (the recent sessions below): a usage error comes alone.
    options = _verify_options(args)

    route: SessionRoute | None = None  # --db: no home, so main.db's totals are not compared
    if args.db is not None:
        if args.session is not None:
            raise UsageError(f"give a SESSION or --db PATH, not both (got {args.session!r} and --db {args.db})")
        db_path = db_argument(args.db)
    else:
        # The session is resolved before anything is printed, so a name that finds nothing is
        # the one error line alone; then, as the doctor does, the recent sessions. The
        # resolver finds an explicit id or name without main.db, so main.db is only required
        # for "latest".
        main_db = sessions.main_db_path()
        try:
            ref = sessions.resolve_session(args.session)
        except LedgerError as exc:
            message = exc.detail if exc.path is None or str(exc.path) in exc.detail else str(exc)
            raise LedgerError(message + db_hint(args.session)) from None
        if not args.json and main_db.exists():
            from capsem_core.cli.sessions import recent_lines
            from capsem_core.sessions.maindb import recent_sessions

            recent = recent_sessions(main_db, RECENT_SESSIONS)
            if recent:
                sys.stdout.write("\n".join(recent_lines(recent, False, out_colour)) + "\n")
        db_path = ref.db_path
        route = SessionRoute(main_db, ref.id)

    refuse_symlinks(Path(db_path), archive=True)
    bar = VerifyProgressBar() if args.verify_bodies and sys.stderr.isatty() else None
    try:
        report = check_ledger(db_path, rows=args.rows, verify_bodies=args.verify_bodies, progress=bar,
                              route=route, options=options)
    finally:
        if bar is not None:
            bar.end()
    if args.json:
        sys.stdout.write(report_to_json(report, strict=args.strict))
    else:
        sys.stdout.write(render_text(report, colour=out_colour))
    return report.exit_code(args.strict)


def _duration(text: str) -> float:
    from capsem_core.check.incremental import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _verify_options(args: argparse.Namespace) -> VerifyOptions | None:
    """--incremental, --max-age, --subset and --subset-seed, checked against each other; None
    when none is given (every block, and a plain check never loads the modules that choose)."""
    if (args.incremental or args.subset is not None) and not args.verify_bodies:
        raise UsageError("--incremental and --subset choose what --verify-bodies reads; give --verify-bodies too")
    if args.max_age is not None and not args.incremental:
        raise UsageError("--max-age says when --incremental reads a verified block again; give --incremental too")
    if args.subset_seed is not None and args.subset is None:
        raise UsageError("--subset-seed is the seed of a random --subset x%; give --subset too")
    if not args.incremental and args.subset is None:
        return None
    from capsem_core.check.incremental import VerifyOptions
    from capsem_core.check.subset import Subset

    try:
        subset = None if args.subset is None else Subset.parse(args.subset, seed=args.subset_seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return VerifyOptions(incremental=args.incremental, subset=subset, max_age=args.max_age)


def _list_sessions(as_json: bool, out_colour: bool) -> int:
    """--list: main.db's recent sessions, as a table or one JSON object."""
    from capsem_core import sessions
    from capsem_core.cli.sessions import recent_json, recent_lines
    from capsem_core.sessions.maindb import recent_sessions

    main_db = sessions.main_db_path()
    if not main_db.exists():
        raise LedgerError(f"main.db not found at {main_db}")
    recent = recent_sessions(main_db, RECENT_SESSIONS)
    if not recent:
        raise LedgerError("No sessions found in main.db", main_db)
    if as_json:
        import json

        sys.stdout.write(json.dumps({"format": "capsem-ledger-sessions", "version": 1, "main_db": str(main_db),
                                     "sessions": [recent_json(r) for r in recent]}, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(recent_lines(recent, True, out_colour)) + "\n")
    return 0




__all__ = ["add_arguments", "run"]
