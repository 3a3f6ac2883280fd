"""``capsem-ledger export [SESSION | --db PATH] --warc OUT.warc.gz [--warc-level N]``: every
body as a WARC 1.1 record, in Capsem's own export's format (``Ledger.export_warc``).

OUT goes through the output-path policy (its name checked before the ledger is read; a
temporary file renamed over it only once the closing warcinfo is written; a device or FIFO
written into; ``-`` is stdout, never a terminal). The skipped bodies the summary names are
printed to stderr (sanitized, at most ``MAX_SKIPPED_SAMPLE`` of them; every one is counted in
the file's closing warcinfo), then one line of totals. Exit 0 when every body was written, 1
when any was skipped (or the export failed: then nothing is left under OUT).
"""

from __future__ import annotations

import argparse
import os
import sys

from capsem_core.cli.arguments import ledger_target
from capsem_core.cli.terminal import sanitize
from capsem_core.errors import LedgerError
from capsem_core.export import SkippedBody, WarcSummary
from capsem_core.outputs import STDOUT

DEFAULT_LEVEL = 6


def skipped_line(body: SkippedBody) -> str:
    """One skipped body, as stderr shows it (every ledger string sanitized)."""
    field = f" ({body.field})" if body.field else ""
    return (f"capsem-ledger export: skipped {sanitize(body.event_id)} {sanitize(body.source_table)}/"
            f"{sanitize(body.direction)}: {body.reason}{field}: {sanitize(body.detail)}")


def totals_line(summary: WarcSummary, out: str) -> str:
    where = "stdout" if out == STDOUT else sanitize(out)
    line = f"exported {summary.records} records ({summary.bytes:,} bytes) to {where}"
    if summary.skipped:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.skipped_by_reason.items()) if n)
        line += f"; {summary.skipped} bodies skipped ({reasons}), counted in the closing warcinfo"
    return line


def run(args: argparse.Namespace) -> int:
    # Loaded here, not with the parser: export --help reads no ledger (and loads no numpy).
    from capsem_core.ledger import Ledger
    from capsem_core.snapshot import refuse_symlinks

    out = os.fspath(args.warc)   # its name checked by the parser, before the ledger is read
    if out == STDOUT and sys.stdout.isatty():
        raise LedgerError("a gzip WARC is not written to a terminal: redirect stdout or name a file")
    db_path = ledger_target(args)
    refuse_symlinks(db_path, archive=True)
    level = DEFAULT_LEVEL if args.warc_level is None else args.warc_level
    with Ledger(db_path, block_cache_bytes=0) as ledger:
        if out == STDOUT:
            sys.stdout.flush()
        summary = ledger.export_warc(out, level=level)
    for body in summary.sample:
        print(skipped_line(body), file=sys.stderr)
    if summary.skipped > len(summary.sample):
        print(f"capsem-ledger export: ... and {summary.skipped - len(summary.sample)} more skipped bodies not named",
              file=sys.stderr)
    print(totals_line(summary, out), file=sys.stderr)
    return 1 if summary.skipped else 0


__all__ = ["DEFAULT_LEVEL", "run", "skipped_line", "totals_line"]
