"""The progress bar ``check --verify-bodies`` shows on a terminal while bodies are read back.

``check_ledger`` takes a ``progress(bytes_done, bodies_done)`` callback; one that also has
``begin(total_bytes, total_bodies)`` and ``end()`` is told the totals first and the end last.
This is the command line's: a rich bar on stderr, drawn only on a terminal.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from capsem_core.cli.terminal import colour_wanted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


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


__all__ = ["VerifyProgressBar"]
