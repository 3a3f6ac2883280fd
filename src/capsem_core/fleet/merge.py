"""Joining a split ledger's tasks into the report one whole check gives.

A ledger whose archive is larger than a run's ``range_bytes`` is checked as one task without
--verify-bodies (pages, tables, the body archive: everything but reading bodies back) plus
one ``RangeTask`` per byte range of its archive. ``merge_split`` fills the report's
verify_bodies section from the ranges, in offset order, exactly as ``check --verify-bodies``
would have: skipped when the pages are damaged or the index and the archive disagree, else
every range's bodies, bytes, verified count and failures (the first MAX_FINDINGS_PER_CHECK
of them kept, all counted). When a range could not be read, or read another snapshot of the
index than the check did (a ledger that changed during the run), it returns None: the ledger
is then checked again as one task, so a merged report is never a mix of two ledgers.
"""

from __future__ import annotations

from collections.abc import Sequence

from capsem_core.check.incremental import Coverage, Share
from capsem_core.check.report import CHECKS, CheckReport, CheckResult
from capsem_core.check.verify import SKIPPED_UNTIL_AGREE
from capsem_core.fleet.task import RangeOutcome

_TITLES = dict(CHECKS)


def merge_split(report: CheckReport, ranges: Sequence[RangeOutcome]) -> CheckReport | None:
    """``report`` (a check without --verify-bodies) with its verify_bodies section made from
    ``ranges`` (in offset order), or None when the ranges cannot stand for one verify."""
    report.verify_bodies = True
    if report.ended_early:
        return report  # every section after the pages is already skipped, as check leaves it
    archive = report.checks["body_archive"]
    verify = CheckResult("verify_bodies", _TITLES["verify_bodies"])
    report.checks["verify_bodies"] = verify
    if archive.findings_total:
        verify.skip(SKIPPED_UNTIL_AGREE)
        return report
    bodies, blocks = archive.counts.get("bodies"), archive.counts.get("blocks")
    for part in ranges:
        if part.error is not None or part.bodies_indexed != bodies or part.blocks_indexed != blocks:
            return None
    total = sum(p.bodies for p in ranges)
    if total != bodies:
        return None
    verify.counts.update(bodies=total, verified=0, body_bytes=sum(p.body_bytes for p in ranges))
    # A whole verify split into ranges covers what one kernel run covers: every range's blocks.
    report.coverage = Coverage(verified=Share(sum(p.blocks for p in ranges), total,
                                              sum(p.disk_bytes for p in ranges)))
    if total == 0:
        return report
    failures = 0
    for part in ranges:
        for finding in part.findings:
            verify.add(finding)
        # The findings a range did not send were counted by it; the section counts them too.
        verify.findings_total += part.failures - len(part.findings)
        failures += part.failures
    verify.counts["verified"] = total - failures
    return report


__all__ = ["merge_split"]
