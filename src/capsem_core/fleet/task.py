"""The work of a fleet run, as it runs in a worker: one ledger's check, or one block range's verify.

A ``LedgerTask`` is ``check_ledger`` on one ledger with the options ``check`` itself takes
(``check_options`` refuses any keyword ``check_ledger`` does not take, ``UnsupportedOption``;
the verify options travel as its one ``options=VerifyOptions(...)``); its
``TaskOutcome`` holds the very ``CheckReport`` ``check --json`` prints, or the one-line reason
the ledger could not be checked at all. A ``RangeTask`` verifies the bodies of the blocks
whose offsets lie in one byte range of ``session.bodies``: the same index scan and native
kernel as ``check --verify-bodies``, over the slice of the body index those blocks hold, its
failures worded as the report words them (``merge.py`` joins the ranges of a ledger into its
report). Both run in a process of their own (a local job or a Dask worker) and return small,
picklable results; nothing here prints.
"""

from __future__ import annotations

import inspect
import os
import socket
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from capsem_core import verify as _verify
from capsem_core.check import check_ledger
from capsem_core.check.report import MAX_FINDINGS_PER_CHECK, CheckReport, Finding
from capsem_core.check.route import SessionRoute
from capsem_core.check.verify import body_finding
from capsem_core.errors import LedgerError
from capsem_core.snapshot import Snapshot

if TYPE_CHECKING:
    from capsem_core.fleet.discover import FleetLedger

# The options of a fleet run that are check_ledger's own: a name check_ledger does not take
# is refused up front (UnsupportedOption), never dropped.
# ``route`` is each ledger's own (``task_for``), not an option of the run.
_CHECK_PARAMETERS = frozenset(inspect.signature(check_ledger).parameters) - {"db_path", "progress", "route"}
# The options under which a ledger's verify may be split into block ranges: a VerifyOptions
# that is not ``whole`` (incremental, a subset) reads and keeps state of the whole ledger.
SPLITTABLE_OPTIONS = frozenset(("rows", "verify_bodies"))


def splittable(options: dict[str, Any]) -> bool:
    """True when a ledger checked with ``options`` may have its verify split into block
    ranges: nothing but rows and verify_bodies, or a verify-options value that reads every
    block in full (its ``whole`` is True: no incremental record, no subset)."""
    for name, value in options.items():
        if name not in SPLITTABLE_OPTIONS and not getattr(value, "whole", False):
            return False
    return True


class UnsupportedOption(ValueError):
    """A check option this build's ``check_ledger`` does not take."""


def check_options(**options: Any) -> dict[str, Any]:
    """The keyword arguments for ``check_ledger``: options left at None or False are left
    out (check's defaults), any other that ``check_ledger`` does not take is refused."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None or value is False:
            continue
        if name not in _CHECK_PARAMETERS:
            flag = "--" + name.replace("_", "-")
            raise UnsupportedOption(f"{flag} is not supported by this build's check (check_ledger takes "
                                    f"{', '.join(sorted(_CHECK_PARAMETERS))})")
        out[name] = value
    return out


def worker_name() -> str:
    """Which process ran a task: a Dask worker's address, else host:pid."""
    # Only a process Dask started has it imported; importing it here would cost half a second.
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        try:
            return str(distributed.get_worker().address)
        except ValueError:  # not inside a worker's task
            pass
    return f"{socket.gethostname()}:{os.getpid()}"


def failure_text(exc: BaseException) -> str:
    """One line for a ledger that could not be checked: a LedgerError's own words (it names
    its file), else the exception's kind and message."""
    if isinstance(exc, LedgerError):
        return str(exc)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class LedgerTask:
    """Check one ledger: ``check_ledger(db_path, route=route, **options)``; ``route``, for a
    home's ledger, has its totals compared with main.db's as ``check SESSION`` does."""

    db_path: Path
    options: dict[str, Any] = field(default_factory=dict)
    route: SessionRoute | None = None


def task_for(ledger: FleetLedger, options: dict[str, Any]) -> LedgerTask:
    """The check of one ledger a fleet run found, reached through its home where it has one."""
    route = SessionRoute(ledger.main_db, ledger.session_id) if ledger.main_db is not None else None
    return LedgerTask(ledger.db_path, options, route)


@dataclass(slots=True)
class TaskOutcome:
    """What a ledger's check gave: its report, or why there is none (``error``)."""

    report: CheckReport | None
    error: str | None
    seconds: float
    worker: str


def check_task(task: LedgerTask) -> TaskOutcome:
    """Run one ledger's check. A ledger that cannot be checked (missing, removed meanwhile,
    unreadable, locked, foreign) is an outcome with ``error``, not an exception; anything
    else raised is a failure of the task itself (the runner retries or reports it)."""
    began = time.perf_counter()
    try:
        report = check_ledger(task.db_path, route=task.route, **task.options)
    except (LedgerError, sqlite3.Error, OSError, MemoryError) as exc:
        return TaskOutcome(None, failure_text(exc), time.perf_counter() - began, worker_name())
    return TaskOutcome(report, None, time.perf_counter() - began, worker_name())


@dataclass(frozen=True, slots=True)
class RangeTask:
    """Verify the bodies of the blocks whose offset lies in ``[lo, hi)`` (``hi`` None: to
    the end of the archive)."""

    db_path: Path
    lo: int
    hi: int | None


@dataclass(slots=True)
class RangeOutcome:
    """One block range's verify: the index as this task saw it (``bodies_indexed``,
    ``blocks_indexed``: a merge refuses ranges of another snapshot), the range's bodies,
    their bytes, how many failed and the first MAX_FINDINGS_PER_CHECK of those failures."""

    bodies_indexed: int = 0
    blocks_indexed: int = 0
    blocks: int = 0
    disk_bytes: int = 0                 # on-disk bytes of the range's blocks
    bodies: int = 0
    body_bytes: int = 0
    failures: int = 0
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    worker: str = ""


def range_task(task: RangeTask) -> RangeOutcome:
    """Verify one block range of a ledger through the native kernel: bodies in archive order
    (the index scan's), so the ranges of a ledger, in offset order, list their failures in
    the order one whole verify does."""
    began = time.perf_counter()
    out = RangeOutcome()
    try:
        _verify_range(task, out)
    except (LedgerError, sqlite3.Error, OSError, MemoryError) as exc:
        out.error = failure_text(exc)
    out.seconds = time.perf_counter() - began
    out.worker = worker_name()
    return out


def _verify_range(task: RangeTask, out: RangeOutcome) -> None:
    # One snapshot for the index and the labels of failing rows, as the check reads it.
    with Snapshot.open(task.db_path) as snapshot:
        index = snapshot.index()
        k_off, b_blk = index.blocks.block_offset, index.block_offset
        out.bodies_indexed, out.blocks_indexed = len(index), len(index.blocks)
        hi = np.iinfo(np.int64).max if task.hi is None else task.hi
        k_lo, k_hi = (int(x) for x in np.searchsorted(k_off, [task.lo, hi], side="left"))
        b_lo, b_hi = (int(x) for x in np.searchsorted(b_blk, [task.lo, hi], side="left"))
        rows = index[b_lo:b_hi]
        out.blocks = k_hi - k_lo
        out.disk_bytes = int(index.blocks.disk_len[k_lo:k_hi].sum()) if out.blocks else 0
        out.bodies = b_hi - b_lo
        out.body_bytes = int(rows.body_len.sum()) if out.bodies else 0
        if out.bodies == 0:
            return
        faults = _verify.run(snapshot, _verify.Part(rows, index.blocks.take(slice(k_lo, k_hi)))).faults
        out.failures = len(faults)
        out.findings = [body_finding(f) for f in faults[:MAX_FINDINGS_PER_CHECK]]


def block_ranges(archive_size: int, range_bytes: int) -> list[tuple[int, int | None]]:
    """Byte ranges of about ``range_bytes`` covering every block offset of an archive of
    ``archive_size`` bytes (the last one open-ended, so a block recorded past the size the
    run saw still falls in exactly one)."""
    if range_bytes <= 0:
        raise ValueError("range_bytes must be positive")
    n = max(1, -(-archive_size // range_bytes))
    edges = [i * range_bytes for i in range(n)]
    return [(lo, edges[i + 1] if i + 1 < n else None) for i, lo in enumerate(edges)]


__all__ = ["SPLITTABLE_OPTIONS", "LedgerTask", "RangeOutcome", "RangeTask", "TaskOutcome", "UnsupportedOption",
           "block_ranges", "check_options", "check_task", "failure_text", "range_task", "splittable", "worker_name"]
