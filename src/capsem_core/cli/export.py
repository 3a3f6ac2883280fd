"""``capsem-ledger export [SESSION | --db PATH] DIR``: every body to a file, plus a manifest
(``capsem_core.export.files``); ``--warc OUT.warc.gz`` instead of DIR: the session as one WARC
1.1 file (``export_warc.py``). Damaged bodies are left out and named on stderr (exit 1).
"""

from __future__ import annotations

import argparse
import sys

from capsem_core.cli import export_warc
from capsem_core.cli.arguments import counted, ledger_target, output_argument, path_argument, session_argument
from capsem_core.cli.errors import UsageError
from capsem_core.cli.terminal import sanitize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # SESSION and DIR are both optional to the parser (DIR is not needed with --warc), so the
    # words are read here: one word is DIR (or, with --warc, SESSION), two are SESSION DIR.
    parser.add_argument("words", nargs="*", metavar="[SESSION] DIR",
                        help="the session (id or VM name; default: the latest in main.db) and the directory the "
                             "bodies go to (created if missing; its parent must exist; '' is refused)")
    parser.add_argument("--db", type=path_argument, metavar="PATH",
                        help="read this session.db, or the ledger directory holding it, directly (main.db is not "
                             "read; not together with SESSION)")
    parser.add_argument("--warc", type=output_argument("output file", stdout=True), metavar="OUT",
                        help="instead of DIR: the session as one WARC 1.1 file (gzip, one member per record), "
                             "as Capsem exports it; '-' is stdout")
    parser.add_argument("--warc-level", type=counted(0, 12), metavar="N",
                        help=f"libdeflate compression level of --warc, 0..12 (default {export_warc.DEFAULT_LEVEL})")


def _words(args: argparse.Namespace) -> None:
    """SESSION and DIR from the words, each checked as the parser checks its arguments."""
    words = list(args.words)
    wanted = 1 if args.warc is not None else 2
    if len(words) > wanted:
        raise UsageError("DIR and --warc are two different exports: give one of them" if args.warc is not None
                         else f"one SESSION and one DIR at most, not {len(words)} words")
    if args.warc is None and not words:
        raise UsageError("name what to export to: DIR, or --warc OUT.warc.gz")
    args.directory = None if args.warc is not None else words.pop()
    args.session = words.pop() if words else None
    for name, word, check in (("SESSION", args.session, session_argument),
                              ("DIR", args.directory, output_argument("output directory"))):
        try:
            if word is not None:
                check(word)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"argument {name}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    _words(args)
    if args.warc is not None:
        return export_warc.run(args)
    if args.warc_level is not None:
        raise UsageError("--warc-level is the compression of --warc: give --warc OUT with it")
    return _export_directory(args)


def _export_directory(args: argparse.Namespace) -> int:
    from capsem_core.export.files import export_files
    from capsem_core.ledger import Ledger
    from capsem_core.snapshot import refuse_symlinks

    db_path = ledger_target(args)
    refuse_symlinks(db_path, archive=True)
    with Ledger(db_path, block_cache_bytes=0) as ledger:
        summary = export_files(ledger, args.directory)
    for fault in summary.faults:
        print(f"capsem-ledger export: skipped {sanitize(fault.message)}", file=sys.stderr)
    if summary.damaged > len(summary.faults):
        print(f"capsem-ledger export: ... and {summary.damaged - len(summary.faults)} more damaged bodies not named",
              file=sys.stderr)
    print(f"exported {summary.exported} bodies to {sanitize(args.directory)} ({summary.already_there} already there"
          + (f", {summary.damaged} damaged left out" if summary.damaged else "") + ")", file=sys.stderr)
    return 1 if summary.damaged else 0


__all__ = ["add_arguments", "run"]
