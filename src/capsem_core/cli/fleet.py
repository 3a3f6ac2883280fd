"""``capsem-ledger check --all``: every ledger of the home (and of ``--path`` trees) at once.

``check`` delegates here when ``--all`` is given. The ledgers are checked by
``capsem_core.fleet.check_all`` with check's own options (``--verify-bodies``, ``-n``, and
``--incremental`` and the other verify options once ``check`` takes them), a process per
ledger on this machine (``--jobs``, default one per core) or on a Dask cluster
(``--scheduler tcp://host:port``; ``tls://host:port`` with ``--tls-ca-file``, ``--tls-cert``
and ``--tls-key`` or Dask's TLS configuration; or ``local`` for a cluster of ``--jobs``
workers here).
Text: one summary table (session, path, verdict, counts, time), the totals, every directory
found or given that was not checked and why (unreadable, with the OS's reason; a ``--path``
missing or not searched; not a ledger), each damaged, unreadable or warned ledger with its
findings one line each (``--details``: every finding of every ledger, with places and
examples), and a last line that says "sound" only when every ledger found was read; every
ledger string escaped. ``--json``: one object with ``ledgers`` and ``unchecked`` lists.
Progress on a terminal: ledgers done / total and bytes/s. Exit 1 when any ledger is damaged
or unreadable, a directory could not be read or a ``--path`` was not searched (with
``--strict``, warnings too).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, TextIO

from capsem_core.check.report import ERROR, NOTE, OK, SKIPPED, WARN, WARNING, CheckResult, Finding
from capsem_core.cli.arguments import counted, path_argument
from capsem_core.cli.check_text import coverage_words
from capsem_core.cli.errors import Terminated, UsageError
from capsem_core.cli.terminal import Style, colour_wanted, render_table, sanitize
from capsem_core.errors import LedgerError
from capsem_core.sessions.home import home_layout
from capsem_core.fleet import FleetReport, LedgerResult, UnsupportedOption, check_all, discover, fleet_to_json
from capsem_core.fleet.discover import Unchecked

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from capsem_core.fleet.cluster import ClientTls

# check's own options that a fleet run passes through to every ledger's check when they are
# there (check defines them; this module only reads them).
PASSED_THROUGH = ("incremental", "subset", "max_age")
# A tls:// scheduler's client settings (capsem_core.fleet.cluster.client_tls reads them).
TLS_OPTIONS = (("--tls-ca-file", "tls_ca_file", "the CA that signed the scheduler's and this client's certificates"),
               ("--tls-cert", "tls_cert", "this client's certificate (PEM; with its key, unless --tls-key)"),
               ("--tls-key", "tls_key", "the private key of --tls-cert (PEM, unencrypted)"))
# More processes or workers than any machine runs a check in: a bound, not a tuning.
MAX_JOBS = 4096
# Findings shown per damaged or warned ledger without --details (the rest are counted).
FINDINGS_SHOWN = 5
_SEVERITY_STYLE = {ERROR: "red", WARNING: "yellow", NOTE: "dim"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``check --all`` (added to check's parser by ``cli/check.py``)."""
    parser.add_argument("--all", action="store_true",
                        help="check every ledger of the home's run directory (ephemeral and persistent) and of "
                             "each --path tree, in parallel, and print one summary")
    parser.add_argument("--path", action="append", type=path_argument, default=[], metavar="DIR",
                        help="with --all: also every ledger under DIR (a ledger, a home, or a tree of them; "
                             "symbolic links are not followed); repeatable")
    parser.add_argument("--jobs", type=counted(1, MAX_JOBS), metavar="N",
                        help="with --all: ledgers checked at once, a process each (default: one per core); with "
                             "--scheduler local, the cluster's workers")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="with --all: run on the Dask cluster at ADDRESS (tls://host:port, or "
                             "tcp://host:port: anyone who can reach that scheduler can run code on its workers; "
                             "every worker reads the ledgers by the same path), or 'local' for a local cluster "
                             "(needs pip install 'capsem-core[fleet]')")
    for flag, dest, what in TLS_OPTIONS:
        parser.add_argument(flag, dest=dest, metavar="FILE",
                            help=f"with --scheduler tls://...: {what} (Dask's own flag; default: Dask's "
                                 "distributed.comm.tls configuration)")
    parser.add_argument("--details", action="store_true",
                        help="with --all: list every finding of every ledger (with its place and examples), not "
                             "only the first few of each damaged or warned ledger")
    if "--incremental" not in parser._option_string_actions:
        # check itself takes --incremental once it verifies incrementally; until then a fleet
        # run accepts it and passes it through, and check_ledger says whether it can.
        parser.add_argument("--incremental", action="store_true",
                            help="with --verify-bodies: verify only what is new since the last verify")


def refuse_fleet_options(args: argparse.Namespace) -> None:
    """--path, --jobs, --scheduler and --details mean something only with --all."""
    for flag, given in (("--path", bool(args.path)), ("--jobs", args.jobs is not None),
                        ("--scheduler", args.scheduler is not None), ("--details", args.details)):
        if given:
            raise UsageError(f"{flag} is an option of check --all")
    for flag in _tls_given(args):
        raise UsageError(f"{flag} is an option of check --all")


def _tls_given(args: argparse.Namespace) -> list[str]:
    return [flag for flag, dest, _ in TLS_OPTIONS if getattr(args, dest, None) is not None]


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def run(args: argparse.Namespace, **check_kwargs: Any) -> int:
    """``check --all``: the fleet run and its report; exit status 1 when any ledger is
    damaged or unreadable. ``check_kwargs``: keyword arguments of ``check_ledger`` that
    ``check`` built from its own options (e.g. its verify options), passed to every ledger's
    check; without them, the PASSED_THROUGH options are read from ``args`` by name."""
    if args.session is not None or args.db is not None:
        raise UsageError("check --all checks every ledger; give no SESSION or --db with it")
    extra = dict(check_kwargs) or {name: getattr(args, name) for name in PASSED_THROUGH
                                   if getattr(args, name, None) is not None}
    tls: ClientTls | None = None
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import DaskMissing, check_address, client_tls, require_dask

        try:
            check_address(args.scheduler)
        except ValueError:
            raise UsageError(f"--scheduler takes tcp://host:port or 'local' (tls://host:port for TLS), "
                             f"not {args.scheduler!r}") from None
    tls_flags = _tls_given(args)
    if tls_flags and not (args.scheduler or "").startswith("tls://"):
        raise UsageError(f"{tls_flags[0]} is for a TLS scheduler: --scheduler tls://host:port")
    if args.scheduler is not None:
        try:
            require_dask()
        except DaskMissing as exc:
            print(f"capsem-ledger check: {exc}", file=sys.stderr)
            return 2
        # Before the search: a TLS setting that is missing or unusable is one line (exit 1).
        tls = client_tls(args.scheduler, ca_file=args.tls_ca_file, cert=args.tls_cert, key=args.tls_key)
    # The checks only read, so SIGTERM may end them at once: the runner kills its processes.
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        report = _run(args, extra, tls)
    except UnsupportedOption as exc:
        raise UsageError(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(fleet_to_json(report, strict=args.strict))
    else:
        sys.stdout.write(render_fleet(report, colour=colour_wanted(sys.stdout), details=args.details))
    return report.exit_code(args.strict)


def _run(args: argparse.Namespace, extra: dict[str, Any], tls: ClientTls | None) -> FleetReport:
    found = discover(args.path, home=True)
    if not found.ledgers:
        if found.unchecked:  # nothing to check, but what was found or given is reported (exit 1)
            return FleetReport([], list(found.notes), unchecked=list(found.unchecked))
        layout = home_layout()
        where = [str(layout.sessions_root), str(layout.persistent_root)] + [str(p) for p in args.path]
        raise LedgerError(f"no ledgers found in {', '.join(where)}")
    bar = FleetProgressBar(len(found.ledgers), sum(x.size for x in found.ledgers)) if sys.stderr.isatty() else None
    client_context: ContextManager[Any] = nullcontext(None)
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import connect
        from capsem_core.fleet.local import default_jobs

        client_context = connect(args.scheduler, workers=args.jobs or default_jobs(), tls=tls)
    with client_context as client, (bar.shown() if bar is not None else nullcontext()):
        report = check_all(found.ledgers, verify_bodies=args.verify_bodies, rows=args.rows, jobs=args.jobs,
                           client=client, progress=bar, **extra)
    report.notes[:0] = found.notes
    report.unchecked[:0] = found.unchecked
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


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _verified(result: LedgerResult, value: int | None) -> str:
    # A partial verify in its own words ("325 bodies proven unchanged, 0 read back"): its
    # bodies read back alone would read as a verify that found nothing right.
    report = result.report
    if report is None or report.coverage is None or report.checks["verify_bodies"].status == "skipped":
        return _count(value)
    return coverage_words(report.coverage, report.checks["verify_bodies"].counts.get("verified", 0)) or _count(value)


def _finding_lines(s: Style, check: CheckResult, finding: Finding, details: bool) -> list[str]:
    style = _SEVERITY_STYLE.get(finding.severity, "dim")
    code = finding.code if finding.code == check.name else f"{finding.code} ({check.name})"
    out = [s(style, f"    {sanitize(finding.severity)} {sanitize(code)}: {sanitize(finding.message)}")]
    if details:
        if finding.location:
            out.append(s("dim", "      at " + " ".join(f"{sanitize(k)}={sanitize(v)}"
                                                     for k, v in finding.location.items())))
        for example in finding.examples:
            out.append(s("dim", "      e.g. " + " ".join(f"{sanitize(k)}={sanitize(v)}" for k, v in example.items())))
    return out


def _ledger_findings(s: Style, result: LedgerResult, details: bool) -> list[str]:
    """A ledger's findings, one line each: its errors and warnings (the first FINDINGS_SHOWN
    of them), or with ``details`` every finding the report kept, with places and examples."""
    report = result.report
    if report is None:
        return [s("red", f"    {sanitize(result.error or 'could not be checked')}")]
    out: list[str] = []
    shown = total = 0
    for check in report.checks.values():
        if check.status == SKIPPED:
            continue
        wanted = [f for f in check.findings if details or f.severity != NOTE]
        total += len(wanted) + (check.findings_total - len(check.findings))
        for finding in wanted:
            if details or shown < FINDINGS_SHOWN:
                out += _finding_lines(s, check, finding, details)
                shown += 1
    if total > shown:
        more = "" if details else " (--details lists every finding)"
        out.append(s("dim", f"    ... {_plural(total - shown, 'more finding', 'more findings')}{more}"))
    return out


def _unchecked_line(u: Unchecked) -> str:
    where = f"--path {sanitize(u.path)}" if u.given else sanitize(u.path)
    return f"  {where}: {sanitize(u.reason)}"


def _verdict(s: Style, report: FleetReport) -> str:
    """The last line: "sound" only when every ledger found was read and none is damaged."""
    t = report.totals()
    if report.sound:
        warned = f" ({t['warn']:,} with warnings)" if t["warn"] else ""
        return s("green", f"Every ledger is sound{warned}.")
    parts = [] if report.results else ["no ledger was checked"]
    if t["damaged"]:
        parts.append(f"{t['damaged']:,} damaged")
    if t["unreadable"]:
        parts.append(_plural(int(t["unreadable"]), "ledger unreadable", "ledgers unreadable"))
    unread = [u for u in report.not_looked_at if not u.given]
    if unread:
        parts.append(_plural(len(unread), "directory could not be read", "directories could not be read"))
    parts += [f"--path {sanitize(u.path)} {sanitize(u.reason)}" for u in report.not_looked_at if u.given]
    read = int(t["ok"]) + int(t["warn"])
    head = "Not sound" if report.failed else "Not known to be sound"
    tail = f" ({read:,} of {_plural(len(report), 'ledger', 'ledgers')} checked sound)" if report.results else ""
    return s("red", f"{head}: {'; '.join(parts)}{tail}.")


def render_fleet(report: FleetReport, *, colour: bool = False, details: bool = False) -> str:
    """The text summary of a fleet run (every ledger string escaped for the terminal): a row
    per ledger, the totals, every directory not checked and why, each damaged, unreadable or
    warned ledger with its findings (all of every ledger's with ``details``), and a last
    line that says "sound" only when every ledger found was read."""
    s = Style(colour)
    out = ["", s("bold", f"Ledgers checked: {len(report)}")]
    rows: list[list[object]] = []
    for r in report:
        c = r.counts()
        rows.append([r.ledger.label, r.ledger.directory, r.verdict, _count(c["bodies"]), _count(c["blocks"]),
                     _verified(r, c["verified"]), _count(c["findings"]), _seconds(r.seconds)])
    render_table(out, s, ["session", "path", "verdict", "bodies", "blocks", "verified", "findings", "time"], rows)
    t = report.totals()
    mb = int(t["bytes"]) / 1e6
    rate = mb / report.seconds if report.seconds > 0 else 0.0
    where = f"{report.jobs} local process{'es' if report.jobs != 1 else ''}" if report.runner == "local" \
        else f"the Dask cluster at {report.runner} ({report.jobs} worker threads)"
    out.append(f"Totals: {t['ledgers']} ledgers: {t['ok']} ok, {t['warn']} warn, {t['damaged']} damaged, "
               f"{t['unreadable']} unreadable; {mb:,.1f} MB in {report.seconds:.2f} s ({rate:,.1f} MB/s) on "
               f"{sanitize(where)}")
    if report.unchecked:
        out.append(f"Not checked: {t['directories_unreadable']} unreadable, {t['paths_not_searched']} --path not "
                   f"searched, {t['not_ledgers']} not a ledger")
    unread = report.not_looked_at
    if unread:
        out += ["", s("red", f"Not read ({len(unread)}):")] + [s("red", _unchecked_line(u)) for u in unread]
    others = [u for u in report.unchecked if not u.fails]
    if others:
        out += ["", s("dim", f"Not a ledger ({len(others)}):")] + [s("dim", _unchecked_line(u)) for u in others]
    retried = [r for r in report if r.retried]
    if retried:
        out += ["", s("yellow", "Retried:")]
        for r in retried:
            out += [f"  {sanitize(r.ledger.label)}: {sanitize(why)}" for why in r.retried]
    if report.notes:
        out += ["", s("dim", "Not searched:")] + [f"  {sanitize(n)}" for n in report.notes]
    for title, style, group in (("Damaged or unreadable", "red", report.failed),
                                ("Sound, with warnings", "yellow", [r for r in report if r.verdict == WARN]),
                                ("Sound", "green", [r for r in report if details and r.verdict == OK and r.findings()])):
        if group:
            out += ["", s(style, f"{title} ({len(group)}):")]
            for r in group:
                out.append(s(style, f"  {sanitize(r.verdict)}  {sanitize(r.ledger.label)}  {sanitize(r.ledger.directory)}"))
                out += _ledger_findings(s, r, details)
    out += ["", _verdict(s, report)]
    return "\n".join(out) + "\n"


__all__ = ["FleetProgressBar", "add_arguments", "refuse_fleet_options", "render_fleet", "run"]
