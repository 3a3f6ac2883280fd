"""The text of ``check --all``: the summary of a fleet run and its progress bar on a terminal.

``render_fleet`` turns a ``FleetReport`` into the summary ``cli/fleet.py`` prints (every ledger
string escaped for the terminal); ``FleetProgressBar`` draws ledgers done / total and bytes/s.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from capsem_core.check.report import ERROR, NOTE, OK, SKIPPED, WARN, WARNING, CheckResult, Finding
from capsem_core.cli.check_text import coverage_words
from capsem_core.cli.terminal import Style, colour_wanted, render_table, sanitize
from capsem_core.fleet import FleetReport, LedgerResult
from capsem_core.fleet.discover import NOT_SEARCHED, Unchecked

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Findings shown per damaged or warned ledger without --details (the rest are counted).
FINDINGS_SHOWN = 5
_SEVERITY_STYLE = {ERROR: "red", WARNING: "yellow", NOTE: "dim"}


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
    unread = [u for u in report.not_looked_at if not u.given and u.status != NOT_SEARCHED]
    if unread:
        parts.append(_plural(len(unread), "directory could not be read", "directories could not be read"))
    if t["directories_not_searched"]:
        parts.append(_plural(int(t["directories_not_searched"]), "directory not searched", "directories not searched"))
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
        out.append(f"Not checked: {t['directories_unreadable']} unreadable, {t['directories_not_searched']} not "
                   f"searched, {t['paths_not_searched']} --path not searched, {t['not_ledgers']} not a ledger")
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


__all__ = ["FINDINGS_SHOWN", "FleetProgressBar", "render_fleet"]
