"""The --verify-bodies step of the report.

Every body is read back through its segments' hashes and its own by the native kernel, on the
snapshot the archive check walked (``verify.run``, through ``incremental.verify_part``), and
each failure becomes a finding worded as ``Ledger.verify`` words it; with --incremental or
--subset only part of the blocks is read back (``incremental.py`` decides which, and says
what was covered). The step runs only when the archive check found the index and the file in
agreement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from capsem_core.check.report import ERROR, CheckResult, Finding

if TYPE_CHECKING:
    from capsem_core._native._archive import VerifyOutcome
    from capsem_core.check.incremental import Coverage, PendingRecord, VerifyOptions
    from capsem_core.snapshot import Snapshot
    from capsem_core.verify import BodyFault

# ``progress(bytes_done, bodies_done)`` while --verify-bodies reads bodies back. A callback that
# also has ``begin(total_bytes, total_bodies)`` and ``end()`` methods is told the totals first
# and the end last (the command line's progress bar uses them).
ProgressCallback = Callable[[int, int], None]
# Why the step is skipped when the archive check found damage (a fleet run's merge of block
# ranges says the same).
SKIPPED_UNTIL_AGREE = "the body index and archive disagree; bodies are not read until they agree"


class VerifyStep(NamedTuple):
    """The section, what was covered, and the verification record to write once the whole
    check is known to be done (None when there is none)."""

    result: CheckResult
    coverage: Coverage | None = None
    pending: PendingRecord | None = None


def verify_bodies(snapshot: Snapshot, result: CheckResult, progress: ProgressCallback | None,
                  options: VerifyOptions | None = None, read: VerifyOutcome | None = None) -> VerifyStep:
    """Every body of ``snapshot`` read back through its segments' hashes and its own, failing
    rows labelled through its connection. ``options``: --incremental, --max-age and --subset
    (default: every block). ``read``: the bodies already read back before the archive walk
    (``verify.read_back``, with ``progress`` told and ended there), worded here."""
    # The verify machinery loads when bodies are read back, not for every check.
    from capsem_core.check.incremental import VerifyOptions, verify_part

    index = snapshot.index()
    total = len(index)
    result.counts.update(bodies=total, verified=0, body_bytes=int(index.body_len.sum()) if total else 0)
    end = getattr(progress, "end", None) if read is None else None
    try:
        outcome = verify_part(snapshot, options or VerifyOptions(), progress=progress, read=read)
    finally:
        if end is not None:
            end()
    for f in outcome.faults:
        result.add(body_finding(f))
    result.counts["verified"] = outcome.verified
    return VerifyStep(result, outcome.coverage, outcome.pending)


def body_finding(fault: BodyFault) -> Finding:
    """The report's finding for one body that did not read back (a fleet run's block ranges
    word theirs here too, so a split verify reads like a whole one)."""
    location = {"event_id": fault.event_id, "source_table": fault.source_table, "direction": fault.direction,
                "block_offset": fault.block_offset, "segment_offset": fault.segment_offset, "kind": fault.kind}
    return Finding(fault.kind, ERROR, fault.message, location=location)


__all__ = ["SKIPPED_UNTIL_AGREE", "ProgressCallback", "VerifyStep", "body_finding", "verify_bodies"]
