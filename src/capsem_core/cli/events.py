"""``capsem-ledger events``: a ledger's events page after page, or followed while it is written.

The command resolves its ledger as ``check`` does (``SESSION``, ``--db PATH`` or the latest
session), reads pages through ``Ledger.events`` / ``Ledger.follow`` and prints each event:
one JSON object per line with ``--jsonl`` (the exact values; ASCII-only, so nothing in it can
drive a terminal), otherwise one aligned line per event with every ledger string sanitized.
When it ends it prints ``cursor: <cursor>`` on stderr; ``--after <cursor>`` resumes exactly
after the last event printed. Without ``--follow`` it stops once it has caught up with what
was committed; with it, it polls until Ctrl-C, SIGTERM or SIGHUP and then exits 0. A second
signal interrupts at once (exit 130, 143 or 129, the cursor still printed for what was
written). A page that cannot be read (a row too large for one) ends it after the events
before it: their cursor, then the error's one line (exit 1). A closed pipe ends it quietly.
``--table T --format parquet|arrow -o FILE`` writes one table's rows as a file instead
(``events_file``).
"""

from __future__ import annotations

import argparse
import base64
import bisect
import itertools
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from capsem_core.cli import events_file, startup, streams
from capsem_core.cli.arguments import add_ledger_target, ledger_target, whole_number
from capsem_core.cli.errors import TERMINATING, Terminated, UsageError, on_termination, restore
from capsem_core.cli.terminal import Style, cell, colour_wanted, sanitize
from capsem_core.errors import LedgerError
from capsem_core.events import EVENT_TABLE_NAMES, MAX_LIMIT, choose_tables

if TYPE_CHECKING:   # the reader (numpy) loads when the command runs, not for --help
    from capsem_core.events import Event, EventPage
    from capsem_core.ledger import Ledger

# The columns that say what an event was, per table, in the one-line view (--jsonl has all).
SUMMARY_COLUMNS: dict[str, tuple[str, ...]] = {
    "net_events": ("method", "domain", "path", "status_code", "decision"),
    "model_calls": ("provider", "model", "status_code", "input_tokens", "output_tokens", "stop_reason"),
    "tool_calls": ("tool_name", "origin", "status", "decision"),
    "model_items": ("kind", "model", "tool_name", "call_id"),
    "fs_events": ("action", "path", "size"),
    "exec_events": ("command", "exit_code", "duration_ms"),
    "dns_events": ("qname", "qtype", "rcode", "decision"),
    "audit_events": ("exe", "argv", "exit_code"),
    "substitution_events": ("material_class", "source", "outcome"),
    "security_rule_events": ("event_type", "rule_id", "rule_action", "detection_level"),
    "security_decision_events": ("event_type", "stage", "actor", "effective_decision"),
    "security_ask_events": ("event_type", "rule_name", "status"),
    "transport_events": ("event_type", "network_id", "connection_id"),
}
SUMMARY_CHARS = 120
_WIDTHS = (27, max(map(len, EVENT_TABLE_NAMES)), 7, 12, 16)
_HEADERS = ("TIME", "TABLE", "ID", "EVENT_ID", "BODIES")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_ledger_target(parser)
    parser.add_argument("--table", action="append", metavar="T",
                        help="only this event table (repeatable; default: all of " + ", ".join(EVENT_TABLE_NAMES)
                             + ")")
    parser.add_argument("--after", default="start", metavar="CURSOR",
                        help="where to begin: start (default), latest (only what is committed from now on) or a "
                             "cursor printed by an earlier run")
    parser.add_argument("--limit", type=whole_number, metavar="N", help="print at most N events, then stop")
    parser.add_argument("--follow", action="store_true",
                        help="keep printing events as they are committed, until Ctrl-C, SIGTERM or SIGHUP (exit 0)")
    parser.add_argument("--jsonl", action="store_true",
                        help="one JSON object per event and line, with every column's exact value")
    events_file.add_arguments(parser)


class _Stop:
    """The first Ctrl-C / SIGTERM / SIGHUP asks the follower to stop after the page in hand; a
    second one interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            if signum in TERMINATING:
                raise Terminated(signum)
            raise KeyboardInterrupt
        self.requested = True


def run(args: argparse.Namespace) -> int:
    if args.format is not None:
        return events_file.run(args)
    if args.output is not None:
        raise UsageError("-o names the file of --format parquet|arrow")
    if args.limit == 0:
        raise UsageError("--limit must be at least 1")
    try:
        tables = [t.name for t in choose_tables(args.table)] if args.table else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    db_path = ledger_target(args)
    from capsem_core.ledger import Ledger

    out = sys.stdout
    printer = _JsonLines() if args.jsonl else _Lines(colour_wanted(out))
    stop = _Stop()
    previous: list[tuple[int, Any]] = []
    if args.follow:
        previous = [(signal.SIGINT, signal.signal(signal.SIGINT, stop.handle)), *on_termination(stop.handle)]
    state = _Progress(args.after, out)
    try:
        with Ledger(db_path) as ledger:
            startup.loaded()   # --follow runs for as long as the user wants: collect as usual
            pages = (_followed(ledger, tables, args.after, args.limit, stop) if args.follow
                     else _pages(ledger, tables, args.after, args.limit))
            for page in pages:
                state.print_page(page, printer, args.limit)
                if state.done(args.limit) or stop():
                    break
    except BrokenPipeError:
        streams.discard_stdout()
        return 0
    except (KeyboardInterrupt, Terminated):
        state.report()
        raise
    except (LedgerError, OSError):
        # A page that cannot be read (a row too large for one), or an output that fails (a
        # full disk), ends the run after the events delivered whole: their cursor goes out
        # first, then the error's one line.
        if state.paged:
            state.report()
        raise
    finally:
        restore(previous)
    try:
        out.flush()
    except BrokenPipeError:
        streams.discard_stdout()
        return 0
    state.report()
    return 0


def _page_size(limit: int | None) -> int:
    return MAX_LIMIT if limit is None else min(limit, MAX_LIMIT)


def _followed(ledger: Ledger, tables: list[str] | None, after: str, limit: int | None,
              stop: _Stop) -> Iterator[EventPage]:
    """The first page read now, even if empty, so a follower stopped before any event still
    has a cursor to print (``start`` and ``latest`` name no place of their own), then the
    pages ``follow`` yields as rows are committed."""
    first = ledger.events(tables, after, _page_size(limit))
    yield first
    yield from ledger.follow(tables, first.cursor, _page_size(limit), stop=stop)


def _pages(ledger: Ledger, tables: list[str] | None, after: str, limit: int | None) -> Iterator[EventPage]:
    """Pages until caught up with what is committed (or ``limit`` events), never past it."""
    printed = 0
    while True:
        page = ledger.events(tables, after, _page_size(None if limit is None else limit - printed))
        yield page
        printed += len(page.events)
        after = page.cursor
        if page.caught_up:
            return


class _Progress:
    """What has been written so far, and the cursor that resumes right after it."""

    def __init__(self, after: str, out: TextIO) -> None:
        self.cursor: str | None = None if after in ("start", "latest") else after
        self.printed = 0
        self.paged = False
        self.out = out

    def print_page(self, page: EventPage, printer: _JsonLines | _Lines, limit: int | None) -> None:
        events = page.events
        if limit is not None and self.printed + len(events) > limit:
            events = events[:limit - self.printed]
        done = [0]
        try:
            _deliver(self.out, [printer.line(event) for event in events], done)
        finally:
            written = done[0]
            self.paged = True
            self.printed += written
            self.cursor = page.cursor_at(written) if written < len(page.events) else page.cursor

    def done(self, limit: int | None) -> bool:
        return limit is not None and self.printed >= limit

    def report(self) -> None:
        if self.cursor is not None:
            print(f"cursor: {self.cursor}", file=sys.stderr)


def _deliver(out: TextIO, lines: list[str], done: list[int]) -> None:
    """Write ``lines`` (each ending in a newline) to ``out``'s descriptor, past Python's
    buffer, keeping in ``done[0]`` how many went out whole. A signal can end the write
    anywhere (a second Ctrl-C while a slow reader holds the pipe full); a line the buffer
    still held would go out at exit uncounted, and the printed cursor would repeat it. A
    line cut short is not counted: the cursor resumes at it. (An ``out`` with no descriptor,
    a test's capture, is written through.)"""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation is an OSError
        out.write("".join(lines))
        out.flush()
        done[0] = len(lines)
        return
    out.flush()   # whatever went through the buffer before goes first
    blobs = [line.encode(out.encoding or "utf-8", out.errors or "strict") for line in lines]
    ends = list(itertools.accumulate(map(len, blobs)))
    data = memoryview(b"".join(blobs))
    sent = 0
    try:
        while sent < len(data):
            sent += os.write(fd, data[sent:sent + _WRITE_CHUNK])
    except OSError as exc:
        raise streams.named(exc)   # (out is stdout) a disk that fills says which file it was
    finally:
        done[0] = bisect.bisect_right(ends, sent)


_WRITE_CHUNK = 1 << 20


def _json_value(value: object) -> object:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # "nan", "inf", "-inf": JSON has no such numbers
    return value


class _JsonLines:
    """One event as one JSON line."""

    def line(self, event: Event) -> str:
        record = {"table": event.table, "id": event.id, "event_id": event.event_id, "timestamp": event.timestamp,
                  "bodies": list(event.bodies), "row": event.row}
        try:
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):  # bytes or a non-finite float in a hostile row
            record["row"] = {k: _json_value(v) for k, v in event.row.items()}
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        return line + "\n"


class _Lines:
    def __init__(self, colour: bool) -> None:
        self.style = Style(colour)
        self.header_written = False

    def _line(self, cells: tuple[str, ...], summary: str) -> str:
        time_text, table, row_id, event_id, bodies = cells
        w = _WIDTHS
        return (f"{time_text.ljust(w[0])}  {table.ljust(w[1])}  {row_id.rjust(w[2])}  {event_id.ljust(w[3])}  "
                f"{bodies.ljust(w[4])}  {summary}").rstrip()

    def line(self, event: Event) -> str:
        """One event as its aligned line, after the header the first time."""
        header = ""
        if not self.header_written:
            header = self.style("bold", self._line(_HEADERS, "SUMMARY")) + "\n"
            self.header_written = True
        # Every string from the ledger is sanitized before it is measured or cut.
        summary = "  ".join(f"{name}={sanitize(event.row.get(name))}" for name in SUMMARY_COLUMNS[event.table]
                            if event.row.get(name) is not None)
        cells = (cell(event.timestamp, _WIDTHS[0]), event.table, str(event.id), cell(event.event_id, _WIDTHS[3]),
                 cell(",".join(event.bodies), _WIDTHS[4]))
        return header + self._line(cells, cell(summary, SUMMARY_CHARS)) + "\n"


__all__ = ["SUMMARY_COLUMNS", "add_arguments", "run"]
