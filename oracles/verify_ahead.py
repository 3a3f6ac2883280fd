"""The bound of a verification streamed beside the body index's pass, for a cold check.

From a cold page cache a check reads the body index only as the stream reaches the end of
session.db, and reads every body back after that. A verification streamed beside the
index's pass would take the rows as the pass reaches them; none can start earlier than the
moment the archive check's walk returns, nor know every row then. This oracle builds that
impossible best case, to measure what such a stream could gain: imported as a measured
child's preload (``peak_memory.measured(..., preload=(..., "oracles.verify_ahead"))``) with
``CAPSEM_VERIFY_AHEAD`` naming an .npz written by ``save_index`` (from a warm snapshot of the
same ledger, before the cache is dropped), it changes the child's check in one way: the
bodies' verification starts as the archive walk returns, from the saved index, on every core
and on the walk's segment table as the check's own would, and the check's verification step
takes its outcome instead of starting its own. Its faults are worded as the check's are, so a
bound that verified the wrong bytes would not read sound.

With ``CAPSEM_VERIFY_AHEAD_BODIES_FIRST=1`` as well, the check's read-ahead reads the whole of
session.bodies into the page cache before it starts on session.db, as a stream that took the
small file first would: the archive walk then returns near the start, and the saved index's
verification runs beside the stream of session.db instead of after it. That is the bound of
any verification done inside the stream.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np

ENV = "CAPSEM_VERIFY_AHEAD"
BODIES_FIRST = "CAPSEM_VERIFY_AHEAD_BODIES_FIRST"
_CHUNK = 8 << 20
SAME = ("id", "block_offset", "body_offset", "body_len")


def save_index(db: Path, out: Path) -> None:
    """The body index of the ledger at ``db`` (archive order) and its blocks, as the kernel
    reads them, into ``out`` (.npz)."""
    from capsem_core.snapshot import Snapshot

    with Snapshot.open(db) as snapshot:
        index = snapshot.index()
        arrays = {f"row_{k}": v for k, v in index.kernel_rows().items()}
        arrays.update({f"block_{k}": v for k, v in index.blocks.arrays().items()})
    np.savez(out, **arrays)


class _Ahead:
    """One verification of the saved index on a thread of its own."""

    def __init__(self, snapshot: Any, rows: dict[str, np.ndarray], blocks: dict[str, np.ndarray]) -> None:
        from capsem_core._native import _archive

        self.outcome: Any = None
        self.error: BaseException | None = None
        reader, walk = snapshot.archive(), snapshot.walk

        def run() -> None:
            try:
                self.outcome = _archive.verify_bodies_with(reader, blocks, rows, 0, None, True, walk)
            except BaseException as exc:   # handed to the step that waits for it
                self.error = exc

        self.thread = threading.Thread(target=run, name="verify-ahead", daemon=True)
        self.thread.start()

    def result(self) -> Any:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.outcome


def _install(saved: Path) -> None:
    from capsem_core import verify
    from capsem_core.check import run

    data = np.load(saved)
    rows = {k[len("row_"):]: data[k] for k in data.files if k.startswith("row_")}
    blocks = {k[len("block_"):]: data[k] for k in data.files if k.startswith("block_")}
    started: dict[int, _Ahead] = {}
    archive_walk, kernel_run = run._Check._archive_walk, verify.run

    def walk_then_verify(self: Any, conn: sqlite3.Connection, names: set[str]) -> Any:
        walked = archive_walk(self, conn, names)
        if walked is not None and self.report.verify_bodies and self.snapshot.walk is not None:
            started[id(self.snapshot)] = _Ahead(self.snapshot, rows, blocks)
        return walked

    def take_the_outcome(snapshot: Any, part: Any = None, **kw: Any) -> Any:
        ahead = started.pop(id(snapshot), None)
        if ahead is None or (part is not None and not part.whole):
            return kernel_run(snapshot, part, **kw)
        outcome = ahead.result()
        index = snapshot.index()
        # The same rows at the same spans (the digests are the saved ones: what was verified).
        if any(not np.array_equal(getattr(index, name), rows[name]) for name in SAME):
            raise RuntimeError("the saved body index is not this ledger's: save it again")
        faults = verify._faults(outcome, index, snapshot.conn, snapshot.db_path) if outcome.status.any() else []
        return verify.Verified(outcome.status, faults)

    run._Check._archive_walk = walk_then_verify   # type: ignore[method-assign]
    verify.run = take_the_outcome
    if os.environ.get(BODIES_FIRST) == "1":
        _bodies_first()


def _bodies_first() -> None:
    """session.bodies into the page cache before the read-ahead starts on session.db."""
    from capsem_core.snapshot import Snapshot

    read_ahead = Snapshot.read_ahead

    def bodies_then_db(self: Any, *, bodies: bool, share: float = 1.0) -> None:
        if bodies:
            fd = os.open(self.db_path.with_suffix(".bodies"), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                with open(os.devnull, "wb") as sink:
                    offset = 0
                    while (sent := os.sendfile(sink.fileno(), fd, offset, _CHUNK)) > 0:
                        offset += sent
            finally:
                os.close(fd)
        read_ahead(self, bodies=bodies, share=share)

    Snapshot.read_ahead = bodies_then_db   # type: ignore[method-assign]


if os.environ.get(ENV):
    _install(Path(os.environ[ENV]))
