"""The report as the doctor prints it: its sections, their order and their wording.

``render_text`` reads a ``CheckReport`` and writes nothing but text. Every string that came
from the ledger or the disk goes through ``capsem_core.cli.terminal.sanitize`` and every
table through its ``render_table``, so the only escape sequences in the text are ``Style``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsem_core.check.report import ERROR, FAIL, NOTE, OK, SKIPPED, WARN, WARNING, CheckReport, CheckResult
from capsem_core.cli.terminal import Style, render_table, sanitize

if TYPE_CHECKING:   # a report has a coverage only after --verify-bodies, which loaded its module
    from capsem_core.check.incremental import Coverage, Share

QUICK_CHECK_LINES_SHOWN = 10
PROBLEMS_SHOWN = 5
PREVIEW_CELL_CHARS = 60
EXAMPLES_SHOWN = 3

_SEVERITY_STYLE = {ERROR: "red", WARNING: "yellow", NOTE: "yellow"}


def coverage_words(cov: Coverage, matched: int) -> str | None:
    """The verify line of a partial verify (``check`` and ``check --all``), ``matched`` being
    the bodies read back that matched their hashes: "325 bodies proven unchanged, 0 read
    back", "... 25 read back (25 match their hashes), 300 skipped"; None for a whole verify,
    whose line is "matched/bodies read back and match their hashes". A count of bodies read
    back over all bodies would read as damage when most were proven unchanged or skipped."""
    if not cov.incremental and cov.subset is None:
        return None
    read = cov.verified.bodies
    parts = [f"{cov.unchanged.bodies:,} proven unchanged"] if cov.incremental else []
    parts.append(f"{read:,} read back" + (f" ({matched:,} match their hashes)" if read else ""))
    if cov.subset is not None:
        parts.append(f"{cov.skipped.bodies:,} skipped")
    head, _, rest = parts[0].partition(" ")
    parts[0] = f"{head} bod{'y' if head == '1' else 'ies'} {rest}"
    return ", ".join(parts)


def render_text(report: CheckReport, *, colour: bool = False) -> str:
    """The report as the doctor prints it (sections, order and wording).

    Every string that came from the ledger or the disk (the session label and path, finding
    messages quoting values, table cells) goes through ``terminal.sanitize``: the text is
    safe to print, and the only escape sequences in it are Style's own. ``--json`` keeps the
    exact values."""
    s = Style(colour)
    c = report.checks
    out: list[str] = ["", s("bold_cyan", f"Session: {sanitize(report.session)}"),
                      s("dim", f"  {sanitize(report.db_path)}"), ""]

    pages = c["pages"]
    if pages.status == FAIL:
        out.append(s("red", "  Ledger pages damaged (quick_check):"))
        for f in pages.findings[:QUICK_CHECK_LINES_SHOWN]:
            out.append(s("red", f"    {sanitize(f.message)}"))
        out.append("")
        out.append(s("red", "Ledger damaged: the report ends at page integrity."))
        return "\n".join(out) + "\n"
    out.append(s("green", "  Ledger pages intact (quick_check)"))

    tables = c["tables"]
    missing = tables.counts.get("missing") or []
    out.append(s("red", "  Missing tables: " + ", ".join(map(sanitize, missing))) if missing
               else s("green", "  All expected tables present"))
    for f in tables.findings:   # an unread -wal: the counts below are of session.db alone
        if f.code != "missing_tables":
            out.append(s(_SEVERITY_STYLE[f.severity], f"  {sanitize(f.message)}"))
    out.append("")
    out.append(s("bold", "Event counts:"))
    counts = tables.tables["event_counts"]
    render_table(out, s, counts.columns, counts.rows)

    _render_archive(out, s, c["body_archive"], c["verify_bodies"], report.verify_bodies, report.coverage)

    fs = c["fs_overflow"]
    for f in fs.findings:
        out.append(s("yellow", f"  {sanitize(f.message)}"))
        out.append("")

    tools = c["tool_lifecycle"]
    if tools.status != SKIPPED:
        for f in tools.findings:
            out.append(s(_SEVERITY_STYLE[f.severity], f"  {sanitize(f.message)}"))
        total = tools.counts.get("tool_calls", 0)
        if not tools.findings and total:
            out.append(s("green", f"  All {total} tool_calls have matching responses"))
        if tools.findings or total:
            out.append("")

    prov = c["provider_correlation"]
    if prov.status != SKIPPED:
        if prov.findings:
            out.append(s("red", f"  {sanitize(prov.findings[0].message)}"))
            out.append("")
        elif prov.counts.get("model_calls"):
            out.append(s("green", f"  {prov.counts['model_calls']} model_calls from "
                                  f"{prov.counts['provider_net_events']} AI-provider net_events"))
            out.append("")

    nulls = c["null_fields"]
    total = nulls.counts.get("model_calls", 0)
    if nulls.status != SKIPPED and total:
        if nulls.findings:
            out.append(s("yellow", "  Data quality warnings:"))
            for f in nulls.findings:
                out.append(s("yellow", f"    {sanitize(f.message)}"))
        else:
            out.append(s("green", f"  All {total} model_calls have model, tokens, and preview populated"))
        out.append("")

    usage = c["tool_usage"]
    if usage.status != SKIPPED:
        origins = usage.tables.get("origins")
        if origins and origins.rows:
            parts = ", ".join(f"{sanitize(n)} {sanitize(o)}" for o, n in origins.rows)
            out.append(s("cyan", f"  Tool origins: {parts} ({usage.counts['tool_calls']} total)"))
        if usage.counts.get("tool_calls"):
            out.append("")
        if "usage" in usage.tables:
            out.append(s("bold", "Tool usage:"))
            usage_table = usage.tables["usage"]
            render_table(out, s, usage_table.columns, usage_table.rows)

    previews = c["previews"]
    for table, preview in previews.tables.items():
        total = previews.counts[table]
        out.append(s("bold", f"{sanitize(table)} ({total} total, showing last {len(preview.rows)}):"))
        render_table(out, s, preview.columns, preview.rows, PREVIEW_CELL_CHARS)

    _render_identity(out, s, c["identity_graph"])

    verdict = {OK: ("green", "Ledger sound."),
               WARN: ("yellow", "Ledger sound, with warnings."), FAIL: ("red", "Ledger damaged.")}
    style, text = verdict.get(report.status, ("red", "Ledger damaged."))
    out.append(s(style, text))
    return "\n".join(out) + "\n"


def _render_archive(out: list[str], s: Style, archive: CheckResult, verify: CheckResult, requested: bool,
                    coverage: Coverage | None) -> None:
    out.append(s("bold", "Body archive:"))
    codes = {f.code for f in archive.findings}
    if "no_body_index" in codes:
        out.append(s("red", "  No body index: this ledger predates the body archive"))
        out.append("")
        return
    counts = archive.counts
    out.append(f"  {counts['bodies']} bodies indexed in {counts['blocks']} blocks")
    if counts.get("archive_bytes") is not None:
        out.append(f"  session.bodies: {counts['archive_bytes']} bytes, blocks end at {counts['blocks_end']}")
    problems = list(archive.findings)
    problems_total = archive.findings_total
    if verify.status not in (SKIPPED,) and verify.findings_total:
        problems, problems_total = list(verify.findings), verify.findings_total
    for f in problems[:PROBLEMS_SHOWN]:
        out.append(s("red", f"  {sanitize(f.message)}"))
    if problems_total > PROBLEMS_SHOWN:
        out.append(s("red", f"  ... and {problems_total - PROBLEMS_SHOWN} more"))
    if not problems_total:
        out.append(s("green", "  Index and archive agree"))
    if verify.status != SKIPPED:
        verified = verify.counts.get("verified", 0)
        # A partial verify says what it proved and read, not matched/all (which reads as damage).
        partial = coverage_words(coverage, verified) if coverage is not None else None
        line = f"  {partial}" if partial else f"  {verified}/{counts['bodies']} bodies read back and match their hashes"
        out.append(s("green" if not verify.findings_total else "red", line))
        if coverage is not None:
            _render_coverage(out, s, coverage)
    elif requested:
        # Asked for but not run: say so, or the report reads as if the bodies were fine.
        out.append(s("yellow", f"  --verify-bodies skipped: {sanitize(verify.reason)}"))
    elif not problems_total:
        out.append(s("dim", "  (--verify-bodies reads every body back through its hash)"))
    out.append("")


def _render_identity(out: list[str], s: Style, graph: CheckResult) -> None:
    if graph.status == SKIPPED:
        return
    out.append(s("bold", "Identity graph:"))
    broken = [f for f in graph.findings if f.code != "route_not_compared"]
    for f in broken:
        out.append(s(_SEVERITY_STYLE[f.severity], f"  {sanitize(f.message)}"))
        for example in f.examples[:EXAMPLES_SHOWN]:
            cells = " ".join(f"{sanitize(k)}={sanitize(v)}" for k, v in example.items())
            out.append(s("dim", f"    e.g. {cells}"))
        if f.count is not None and f.count > len(f.examples[:EXAMPLES_SHOWN]) and f.examples:
            out.append(s("dim", f"    ... {f.count} in all"))
    if not any(f.severity != NOTE for f in broken):
        n = graph.counts
        out.append(s("green", f"  Joins hold: {n.get('model_items', 0)} model_items, {n.get('tool_calls', 0)} tool_calls, "
                              f"{n.get('tool_responses', 0)} tool_responses, {n.get('turns', 0)} turns, "
                              f"{n.get('security_rows', 0)} security rows"))
    if graph.counts.get("route_compared") and not graph.counts.get("route_totals_differ"):
        out.append(s("green", f"  main.db's {graph.counts['route_compared']} totals for this session match its ledger"))
    for f in graph.findings:
        if f.code == "route_not_compared":
            out.append(s("dim", f"  {sanitize(f.message)}"))
    out.append("")


def _share(share: Share) -> str:
    return (f"{share.bodies} bod{'y' if share.bodies == 1 else 'ies'} in {share.blocks} "
            f"block{'' if share.blocks == 1 else 's'} ({share.bytes} bytes on disk)")


def _render_coverage(out: list[str], s: Style, cov: Coverage) -> None:
    """What a partial verify covered (nothing more is said of a whole one)."""
    if cov.incremental or cov.subset is not None:
        out.append(f"    verified fully: {_share(cov.verified)}")
    if cov.incremental:
        from capsem_core.check.incremental import timestamp

        since = f", verified since {timestamp(cov.oldest_unchanged)}" if cov.oldest_unchanged is not None else ""
        out.append(f"    proven unchanged since verified: {_share(cov.unchanged)}{since}")
    if cov.subset is not None:
        out.append(f"    skipped, outside {cov.subset.describe()}: {_share(cov.skipped)}")
    if cov.warning is not None:
        out.append(s("yellow", f"  {sanitize(cov.warning)}"))
    elif cov.incremental:
        out.append(s("dim", f"    verification record: {sanitize(cov.record_path)} ({cov.record})"))


__all__ = ["EXAMPLES_SHOWN", "PREVIEW_CELL_CHARS", "PROBLEMS_SHOWN", "QUICK_CHECK_LINES_SHOWN", "render_text"]
