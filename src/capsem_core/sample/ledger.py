"""``write_sample_ledger``: one deterministic sample session ledger (``session.db`` +
``session.bodies``) written through ``LedgerWriter``, and ``SampleSummary``, what it wrote.

Everything is a pure function of the seed: one ``random.Random`` drives every choice and a
fake clock (advanced by realistic durations, also handed to the writer) stamps every row, so
the same seed gives the same rows and a byte-identical ``session.bodies``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from capsem_core import db as _db
from capsem_core.errors import LedgerError
from capsem_core.paths import SESSION_BODIES, SESSION_DB
from capsem_core.sample.events.recorder import Progress
from capsem_core.sample.profiles import DEFAULT_TARGETS, MIXES, PROFILES, Mix
from capsem_core.sample.session import Session
from capsem_core.sample.units import MIB
from capsem_core.writer import LedgerWriter
from capsem_core.writer import ledger_timestamp as ledger_time

# 2025-06-02T09:00:00Z: a fixed default start so the default sample is reproducible.
DEFAULT_START_TIME = 1748854800.0


@dataclass(frozen=True)
class SampleSummary:
    """What ``write_sample_ledger`` wrote."""

    directory: Path
    seed: int
    mix: str
    codec: str
    bodies: int                 # event_body_blobs rows
    raw_bytes: int              # sum of their lengths (what readers get back)
    archive_bytes: int          # size of session.bodies
    compression_ratio: float    # raw_bytes / archive_bytes
    rows: dict[str, int]        # rows per table, body index tables included
    seconds: float              # wall time to write
    started_at: str             # the session's first and last timestamps (fake clock)
    ended_at: str

    @property
    def bodies_per_second(self) -> float:
        return self.bodies / self.seconds if self.seconds > 0 else 0.0

    @property
    def raw_mb_per_second(self) -> float:
        return self.raw_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        return (f"{self.directory}: {self.mix} sample, seed {self.seed}, codec {self.codec}\n"
                f"  bodies         {self.bodies:,}\n"
                f"  raw bytes      {self.raw_bytes:,} ({self.raw_bytes / MIB:.1f} MiB)\n"
                f"  archive bytes  {self.archive_bytes:,} ({self.archive_bytes / MIB:.1f} MiB)\n"
                f"  ratio          {self.compression_ratio:.2f}x\n"
                f"  rows           {sum(self.rows.values()):,} in {len(self.rows)} tables\n"
                f"  seconds        {self.seconds:.2f} ({self.bodies_per_second:,.0f} bodies/s, "
                f"{self.raw_mb_per_second:.1f} MB/s raw)\n"
                f"  session time   {self.started_at} .. {self.ended_at}")


def _refuse_existing(directory: Path) -> None:
    """A sample never lands on a ledger: either half there (even a link) is refused."""
    for name in (SESSION_DB, SESSION_BODIES):
        if os.path.lexists(directory / name):
            raise LedgerError("a ledger already exists here; refusing to overwrite it with a sample",
                              directory / name)


def write_sample_ledger(directory: os.PathLike[str] | str, *, seed: int = 0, mix: Mix = "realistic",
                        bodies: int | None = None, raw_bytes: int | None = None, codec: str = "deflate",
                        start_time: float = DEFAULT_START_TIME,
                        progress: Progress | None = None,
                        on_close: Callable[[LedgerWriter], object] | None = None) -> SampleSummary:
    """Write one deterministic sample session ledger into ``directory`` (created if needed).

    Generation stops once ``bodies`` bodies or ``raw_bytes`` raw body bytes are written,
    whichever comes first (the turn in progress is finished so every tool call gets its
    response); with neither, the mix's default size. Refuses to touch an existing ledger."""
    if mix not in PROFILES:
        raise ValueError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    if bodies is not None and bodies <= 0:
        raise ValueError("bodies must be positive")
    if raw_bytes is not None and raw_bytes <= 0:
        raise ValueError("raw_bytes must be positive")
    if bodies is None and raw_bytes is None:
        bodies, raw_bytes = DEFAULT_TARGETS[mix]
    directory = Path(directory)
    _refuse_existing(directory)
    began = time.perf_counter()
    clock_box: list[Session] = []
    # Until the session exists (an interrupt can land while it is built) the writer's clock is
    # the session's start: a close on that path must not fail on an empty box.
    # Not durable until closed: nothing reads a sample while it is written, and a durable
    # commit's checkpoint waits on the disk for every index page it dirtied, a cost that grows
    # with the ledger (docs/performance.md, "Sample ledgers and knobs"). The bytes written are the same.
    writer = LedgerWriter(directory, codec=codec, on_close=on_close, durable=False,
                          clock=lambda: clock_box[0].now if clock_box else float(start_time))
    try:
        session = Session(writer, seed=seed, mix=mix, start_time=start_time, target_bodies=bodies,
                          target_raw=raw_bytes, progress=progress)
        clock_box.append(session)
        session.run()
    except BaseException:
        writer.close()
        raise
    writer.close()
    seconds = time.perf_counter() - began
    rows = dict(sorted(session.rec.c.rows.items()))
    db = directory / SESSION_DB
    conn = _db.connect_readonly(db)
    try:
        n_bodies, raw = conn.execute("SELECT COUNT(*), COALESCE(SUM(body_len), 0) FROM event_body_blobs").fetchone()
        rows["event_body_blobs"] = n_bodies
        rows["body_blocks"] = conn.execute("SELECT COUNT(*) FROM body_blocks").fetchone()[0]
    finally:
        conn.close()
    archive = directory / SESSION_BODIES
    archive_bytes = archive.stat().st_size if archive.exists() else 0
    return SampleSummary(directory, seed, mix, codec, n_bodies, raw, archive_bytes,
                         raw / archive_bytes if archive_bytes else 0.0, rows, seconds,
                         ledger_time(start_time), ledger_time(session.now))
