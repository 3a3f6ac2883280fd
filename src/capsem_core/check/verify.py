"""The --verify-bodies step of the report.

Every body is read back through its segments' hashes and its own by the native kernel, over
the index the archive check already scanned (``BodyIndex``), and each failure becomes a
finding worded by ``capsem_core.verify`` (the same words as ``Ledger.verify``); with
--incremental or --subset only part of the blocks is read back (``incremental.py`` decides
which, and says what was covered). The step runs only when the archive check found the
index and the file in agreement (``run.py``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from capsem_core import verify as _verify
from capsem_core.check.archive import BodyIndex
from capsem_core.check.incremental import Coverage, PendingRecord, VerifyOptions, verify_part
from capsem_core.check.report import ERROR, CheckResult, Finding
from capsem_core.verify import BodyFault

# ``progress(bytes_done, bodies_done)`` while --verify-bodies reads bodies back. A callback that
# also has ``begin(total_bytes, total_bodies)`` and ``end()`` methods is told the totals first
# and the end last (the CLI's progress bar uses them).
ProgressCallback = Callable[[int, int], None]
# Why the step is skipped when the archive check found damage (a fleet run's merge of block
# ranges says the same).
SKIPPED_UNTIL_AGREE = "the body index and archive disagree; bodies are not read until they agree"


def verify_bodies(conn: sqlite3.Connection, db_path: Path, index: BodyIndex, result: CheckResult,
                  progress: ProgressCallback | None,
                  options: VerifyOptions | None = None) -> tuple[Coverage, PendingRecord | None]:
    """Every body read back through its segments' hashes and its own (the native kernel), on
    the map of the archive check's reader; failing rows are labelled through ``conn`` (the
    check's connection, in its read transaction). ``options``: --incremental, --max-age and
    --subset (``incremental.py``; default: every block). Returns what was covered, and the
    verification record to write once the check is done (None when there is none)."""
    assert index.reader is not None, "verify runs only on an archive the check opened"
    bodies = index.bodies
    total = int(len(bodies["id"]))
    result.counts.update(bodies=total, verified=0, body_bytes=int(bodies["body_len"].sum()) if total else 0)
    begin, end = getattr(progress, "begin", None), getattr(progress, "end", None)
    try:
        outcome = verify_part(index.reader, index.blocks, bodies, db_path, options or VerifyOptions(), conn=conn,
                              progress=progress, begin=begin, walk=index.walk)
    finally:
        if end is not None:
            end()
    for f in outcome.faults:
        result.add(body_finding(f))
    result.counts["verified"] = outcome.verified
    return outcome.coverage, outcome.pending


def body_finding(fault: BodyFault) -> Finding:
    """The report's finding for one body that did not read back (a fleet run's block ranges
    word theirs here too, so a split verify reads like a whole one)."""
    location = {"event_id": fault.event_id, "source_table": fault.source_table, "direction": fault.direction,
                "block_offset": fault.block_offset, "segment_offset": fault.segment_offset, "kind": fault.kind}
    return Finding(fault.kind, ERROR, fault.message, location=location)


__all__ = ["SKIPPED_UNTIL_AGREE", "ProgressCallback", "body_finding", "verify_bodies"]
