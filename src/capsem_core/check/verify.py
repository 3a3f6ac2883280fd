"""The --verify-bodies step of the report, and the progress bar the CLI shows meanwhile.

Every body is read back through its segments' hashes and its own by the native kernel, over
the index the archive check already scanned (``BodyIndex``), and each failure becomes a
finding worded by ``capsem_core.verify`` (the same words as ``Ledger.verify``); with
--incremental or --subset only part of the blocks is read back (``incremental.py`` decides
which, and says what was covered). The step runs only when the archive check found the
index and the file in agreement (``run.py``).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from capsem_core import verify as _verify
from capsem_core.check.archive import BodyIndex
from capsem_core.check.incremental import Coverage, PendingRecord, VerifyOptions, verify_part
from capsem_core.check.report import ERROR, CheckResult, Finding
from capsem_core.verify import BodyFault
from capsem_core.cli.terminal import colour_wanted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

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


class VerifyProgressBar:
    """A rich progress bar on stderr for --verify-bodies: bytes, bodies and throughput."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._total_bodies = 0

    def begin(self, total_bytes: int, total_bodies: int) -> None:
        # rich on first use: only a verify on a terminal draws a bar.
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self._total_bodies = total_bodies
        self._progress = Progress(
            TextColumn("verifying"), BarColumn(), DownloadColumn(),
            TextColumn("{task.fields[bodies]:,}/{task.fields[total_bodies]:,} bodies"),
            TransferSpeedColumn(), TimeRemainingColumn(),
            console=Console(file=self._stream, no_color=not colour_wanted(self._stream)), transient=True)
        self._task = self._progress.add_task("verify", total=max(total_bytes, 1), bodies=0,
                                             total_bodies=total_bodies)
        self._progress.start()

    def __call__(self, bytes_done: int, bodies_done: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=bytes_done, bodies=bodies_done)

    def end(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


__all__ = ["SKIPPED_UNTIL_AGREE", "ProgressCallback", "VerifyProgressBar", "body_finding", "verify_bodies"]
