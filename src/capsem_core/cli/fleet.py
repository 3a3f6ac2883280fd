"""``capsem-ledger check --all``: every ledger of the home (and of ``--path`` trees) at once.

``check`` delegates here when ``--all`` is given. The ledgers are checked by
``capsem_core.fleet.check_all`` with check's own options (``--verify-bodies``, ``-n``, and
``--incremental`` and the other verify options once ``check`` takes them), a process per
ledger on this machine (``--jobs``, default one per core) or on a Dask cluster
(``--scheduler tcp://host:port``, or ``local`` for a cluster of ``--jobs`` workers here).
Text: one summary table (session, path, verdict, counts, time), the totals, and each
damaged or unreadable ledger named with its first problem; every ledger string escaped.
``--json``: one object with a ``ledgers`` list. Progress on a terminal: ledgers done / total
and bytes/s. Exit 1 when any ledger is damaged or unreadable (with ``--strict``, warnings
too).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, TextIO

from capsem_core.check.report import FAIL
from capsem_core.cli.arguments import whole_number
from capsem_core.cli.errors import Terminated, UsageError
from capsem_core.cli.terminal import Style, colour_wanted, render_table, sanitize
from capsem_core.errors import LedgerError
from capsem_core.sessions.home import home_layout
from capsem_core.fleet import FleetReport, LedgerResult, UnsupportedOption, check_all, discover, fleet_to_json

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# check's own options that a fleet run passes through to every ledger's check when they are
# there (check defines them; this module only reads them).
PASSED_THROUGH = ("incremental", "subset", "max_age")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``check --all`` (added to check's parser by ``cli/check.py``)."""
    parser.add_argument("--all", action="store_true",
                        help="check every ledger of the home's run directory (ephemeral and persistent) and of "
                             "each --path tree, in parallel, and print one summary")
    parser.add_argument("--path", action="append", type=Path, default=[], metavar="DIR",
                        help="with --all: also every ledger under DIR (a ledger, a home, or a tree of them; "
                             "symbolic links are not followed); repeatable")
    parser.add_argument("--jobs", type=whole_number, metavar="N",
                        help="with --all: ledgers checked at once, a process each (default: one per core); with "
                             "--scheduler local, the cluster's workers")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="with --all: run on the Dask cluster at ADDRESS (tcp://host:port; every worker "
                             "reads the ledgers by the same path), or 'local' for a local cluster (needs "
                             "pip install 'capsem-core[fleet]')")
    if "--incremental" not in parser._option_string_actions:
        # check itself takes --incremental once it verifies incrementally; until then a fleet
        # run accepts it and passes it through, and check_ledger says whether it can.
        parser.add_argument("--incremental", action="store_true",
                            help="with --verify-bodies: verify only what is new since the last verify")


def refuse_fleet_options(args: argparse.Namespace) -> None:
    """--path, --jobs and --scheduler mean something only with --all."""
    for flag, given in (("--path", bool(args.path)), ("--jobs", args.jobs is not None),
                        ("--scheduler", args.scheduler is not None)):
        if given:
            raise UsageError(f"{flag} is an option of check --all")


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def run(args: argparse.Namespace, **check_kwargs: Any) -> int:
    """``check --all``: the fleet run and its report; exit status 1 when any ledger is
    damaged or unreadable. ``check_kwargs``: keyword arguments of ``check_ledger`` that
    ``check`` built from its own options (e.g. its verify options), passed to every ledger's
    check; without them, the PASSED_THROUGH options are read from ``args`` by name."""
    if args.session is not None or args.db is not None:
        raise UsageError("check --all checks every ledger; give no SESSION or --db with it")
    if args.jobs == 0:
        raise UsageError("--jobs must be at least 1")
    extra = dict(check_kwargs) or {name: getattr(args, name) for name in PASSED_THROUGH
                                   if getattr(args, name, None) is not None}
    if args.scheduler is not None and args.scheduler != "local" and "://" not in args.scheduler:
        raise UsageError(f"--scheduler takes tcp://host:port or 'local', not {args.scheduler!r}")
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import DaskMissing, require_dask

        try:
            require_dask()
        except DaskMissing as exc:
            print(f"capsem-ledger check: {exc}", file=sys.stderr)
            return 2
    # The checks only read, so SIGTERM may end them at once: the runner kills its processes.
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        report = _run(args, extra)
    except UnsupportedOption as exc:
        raise UsageError(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(fleet_to_json(report, strict=args.strict))
    else:
        sys.stdout.write(render_fleet(report, colour=colour_wanted(sys.stdout)))
    return report.exit_code(args.strict)


def _run(args: argparse.Namespace, extra: dict[str, Any]) -> FleetReport:
    found = discover(args.path, home=True)
    if not found.ledgers:
        layout = home_layout()
        where = [str(layout.sessions_root), str(layout.persistent_root)] + [str(p) for p in args.path]
        raise LedgerError(f"no ledgers found in {', '.join(where)}")
    bar = FleetProgressBar(len(found.ledgers), sum(x.size for x in found.ledgers)) if sys.stderr.isatty() else None
    client_context: ContextManager[Any] = nullcontext(None)
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import connect
        from capsem_core.fleet.local import default_jobs

        client_context = connect(args.scheduler, workers=args.jobs or default_jobs())
    with client_context as client, (bar.shown() if bar is not None else nullcontext()):
        report = check_all(found.ledgers, verify_bodies=args.verify_bodies, rows=args.rows, jobs=args.jobs,
                           client=client, progress=bar, **extra)
    report.notes[:0] = found.notes
    return report


class FleetProgressBar:
    """A rich progress bar on stderr: ledgers done / total, bytes checked and bytes/s."""

    def __init__(self, ledgers: int, total_bytes: int, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._ledgers = ledgers
        self._total_bytes = total_bytes
        self._done = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @contextmanager
    def shown(self) -> Iterator[FleetProgressBar]:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        self._progress = Progress(
            TextColumn("checking"), BarColumn(), TextColumn("{task.fields[done]}/{task.fields[ledgers]} ledgers"),
            DownloadColumn(), TransferSpeedColumn(),
            console=Console(file=self._stream, no_color=not colour_wanted(self._stream)), transient=True)
        self._task = self._progress.add_task("check", total=max(self._total_bytes, 1), done=0,
                                             ledgers=self._ledgers)
        self._progress.start()
        try:
            yield self
        finally:
            self._progress.stop()
            self._progress = None

    def __call__(self, result: LedgerResult) -> None:
        self._done += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=result.ledger.size, done=self._done)


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _first_problem(result: LedgerResult) -> str:
    if result.report is None:
        return result.error or "could not be checked"
    for check in result.report.checks.values():
        if check.status == FAIL and check.findings:
            return f"{check.title}: {check.findings[0].message}"
    return "damaged"


def render_fleet(report: FleetReport, *, colour: bool = False) -> str:
    """The text summary of a fleet run (every ledger string escaped for the terminal)."""
    s = Style(colour)
    out = ["", s("bold", f"Ledgers checked: {len(report)}")]
    rows: list[list[object]] = []
    for r in report:
        c = r.counts()
        rows.append([r.ledger.label, r.ledger.directory, r.verdict, _count(c["bodies"]), _count(c["blocks"]),
                     _count(c["verified"]), _count(c["findings"]), _seconds(r.seconds)])
    render_table(out, s, ["session", "path", "verdict", "bodies", "blocks", "verified", "findings", "time"], rows)
    t = report.totals()
    mb = int(t["bytes"]) / 1e6
    rate = mb / report.seconds if report.seconds > 0 else 0.0
    where = f"{report.jobs} local process{'es' if report.jobs != 1 else ''}" if report.runner == "local" \
        else f"the Dask cluster at {report.runner} ({report.jobs} worker threads)"
    out.append(f"Totals: {t['ledgers']} ledgers: {t['ok']} ok, {t['warn']} warn, {t['damaged']} damaged, "
               f"{t['unreadable']} unreadable; {mb:,.1f} MB in {report.seconds:.2f} s ({rate:,.1f} MB/s) on "
               f"{sanitize(where)}")
    retried = [r for r in report if r.retried]
    if retried:
        out += ["", s("yellow", "Retried:")]
        for r in retried:
            out += [f"  {sanitize(r.ledger.label)}: {sanitize(why)}" for why in r.retried]
    if report.notes:
        out += ["", s("dim", "Not searched:")] + [f"  {sanitize(n)}" for n in report.notes]
    failed = report.failed
    if failed:
        out += ["", s("red", f"Damaged or unreadable ({len(failed)}):")]
        for r in failed:
            out.append(s("red", f"  {sanitize(r.verdict)}  {sanitize(r.ledger.label)}  {sanitize(r.ledger.directory)}: "
                                f"{sanitize(_first_problem(r))}"))
    else:
        out += ["", s("green", "Every ledger is sound.")]
    return "\n".join(out) + "\n"


__all__ = ["FleetProgressBar", "add_arguments", "refuse_fleet_options", "render_fleet", "run"]
