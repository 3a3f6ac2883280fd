"""The --verify-bodies step of the report, and the progress bar the CLI shows meanwhile.

Every body is read back through its segments' hashes and its own by the native kernel, over
the index the archive check already scanned (``BodyIndex``), and each failure becomes a
finding worded by ``capsem_core.verify`` (the same words as ``Ledger.verify``). The step
runs only when the archive check found the index and the file in agreement (``run.py``).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.check.archive import BodyIndex
from capsem_core.check.report import ERROR, CheckResult, Finding
from capsem_core.cli.terminal import colour_wanted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# ``progress(bytes_done, bodies_done)`` while --verify-bodies reads bodies back. A callback that
# also has ``begin(total_bytes, total_bodies)`` and ``end()`` methods is told the totals first
# and the end last (the CLI's progress bar uses them).
ProgressCallback = Callable[[int, int], None]


def verify_bodies(conn: sqlite3.Connection, db_path: Path, index: BodyIndex, result: CheckResult,
                  progress: ProgressCallback | None) -> None:
    """Every body read back through its segments' hashes and its own (the native kernel), on
    the map of the archive check's reader; failing rows are labelled through ``conn`` (the
    check's connection, in its read transaction)."""
    assert index.reader is not None, "verify runs only on an archive the check opened"
    bodies = index.bodies
    total = int(len(bodies["id"]))
    result.counts.update(bodies=total, verified=0, body_bytes=int(bodies["body_len"].sum()) if total else 0)
    if total == 0:
        return
    begin, end = getattr(progress, "begin", None), getattr(progress, "end", None)
    if begin is not None:
        begin(result.counts["body_bytes"], total)
    try:
        outcome = _archive.verify_bodies_with(index.reader, index.blocks, bodies, progress=progress,
                                               walk=index.walk)
    finally:
        if end is not None:
            end()
    failures = _verify.findings_of(outcome, bodies, db_path, conn)
    result.counts["verified"] = total - len(failures)
    for f in failures:
        location = {"event_id": f.event_id, "source_table": f.source_table, "direction": f.direction,
                    "block_offset": f.block_offset, "segment_offset": f.segment_offset, "kind": f.kind}
        result.add(Finding(f.kind, ERROR, f.message, location=location))


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


__all__ = ["ProgressCallback", "VerifyProgressBar", "verify_bodies"]
