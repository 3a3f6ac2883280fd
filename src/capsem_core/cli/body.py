"""``capsem-ledger body EVENT_ID``: one verified body's exact bytes.

To a file with ``-o`` (through ``capsem_core.outputs``: a regular file replaced whole, a
device or a FIFO with a reader written into, never a link or a new parent directory;
``-o -`` is stdout), to stdout when it is not a terminal (the exact bytes), and on a
terminal (``-o -`` included) only a text body, shown sanitized (a binary
one is refused: it could drive the terminal). An event with several bodies and no
``--table`` / ``--direction`` to choose one gets them listed instead, on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import sys

from capsem_core.cli.arguments import add_ledger_target, ledger_target, output_argument, text_argument
from capsem_core.cli.terminal import Style, colour_wanted, render_table, sanitize
from capsem_core.errors import LedgerError
from capsem_core.outputs import STDOUT, write_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event_id", metavar="EVENT_ID", type=text_argument, help="the event whose body to write")
    add_ledger_target(parser)
    parser.add_argument("--table", metavar="T", type=text_argument, help="the body's source table (when the event has several bodies)")
    parser.add_argument("--direction", metavar="D", type=text_argument, help="the body's direction: request, response, stdout, ...")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_argument("output file", stdout=True),
                        help="write the bytes to FILE (a regular file is replaced whole; a device or a FIFO is "
                             "written into; never onto a link, never creating a directory); '-' is stdout")


def text_for_terminal(data: bytes) -> str | None:
    """The body as lines a terminal may show (each sanitized), or None when it is binary
    (not UTF-8, or holding NUL bytes)."""
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "\n".join(sanitize(line) for line in text.split("\n"))


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def run(args: argparse.Namespace) -> int:
    # Loaded here, not with the parser: body --help reads no ledger (and loads no numpy).
    from capsem_core.ledger import Ledger
    from capsem_core.snapshot import refuse_symlinks

    db_path = ledger_target(args)
    refuse_symlinks(db_path, archive=True)
    with Ledger(db_path, block_cache_bytes=0) as ledger:
        matches = [m for m in ledger.bodies_of(args.event_id)
                   if (args.table is None or m[0] == args.table) and (args.direction is None or m[1] == args.direction)]
        if not matches:
            wanted = "/".join(x for x in (args.table, args.direction) if x)
            raise LedgerError(f"no body for event {sanitize(args.event_id)}" + (f" ({sanitize(wanted)})" if wanted
                                                                                else ""), db_path)
        if len(matches) > 1:
            s = Style(colour_wanted(sys.stderr))
            out = [f"event {sanitize(args.event_id)} has {len(matches)} bodies: choose one with --table and --direction"]
            render_table(out, s, ["table", "direction", "content_type", "bytes"],
                         [[sanitize(t), sanitize(d), sanitize(c), n] for t, d, c, n in matches])
            print("\n".join(out), file=sys.stderr)
            return 1
        table, direction, content_type, _ = matches[0]
        data = ledger.read_body(args.event_id, table, direction)
    if args.output is not None and args.output != STDOUT:
        write_output(args.output, data, inputs=(ledger.db_path, ledger.bodies_path))
        return 0
    if not sys.stdout.isatty():   # -o - on a terminal is the terminal: shown as below
        _write_stdout(data)
        return 0
    text = text_for_terminal(data)
    if text is None:
        raise LedgerError(f"event {sanitize(args.event_id)} {sanitize(table)}/{sanitize(direction)} is a binary body "
                          f"({len(data)} bytes, {sanitize(content_type) or 'no content type'}): not written to a "
                          "terminal; use -o FILE or redirect stdout")
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    return 0


__all__ = ["add_arguments", "run", "text_for_terminal"]
