"""The Dask runner: a fleet run's tasks on a ``dask.distributed`` cluster.

Tasks are ledgers, and block ranges of the ledgers whose archive is larger than the run's
``range_bytes`` (so one huge ledger spreads over many workers; ``merge.py`` joins them into
the report one whole check gives). Every worker reads the ledgers by path, so the files must
be where the path says on every worker (shared storage), and capsem_core must be installed
on the workers. Largest ledgers go first (Dask priorities), so the longest task does not
start last.

A worker that dies while it holds a task is Dask's to recover: the scheduler gives the task
to another worker (up to its ``allowed-failures``; past that the ledger is unreadable, its
check having killed every worker that took it), and a task that raised is retried
``retries`` times (``Client.submit(retries=)``). Each task logs its start on the scheduler,
which logs each worker it loses with the tasks it held: from those events the report says,
per ledger, how many times its tasks started and why they ran again.

Dask is an optional extra (``pip install 'capsem-core[fleet]'``); this module imports it only
when a run asks for a cluster.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capsem_core import cores
from capsem_core.fleet.discover import FleetLedger
from capsem_core.fleet.merge import merge_split
from capsem_core.fleet.results import LedgerResult
from capsem_core.fleet.task import (
    LedgerTask, RangeOutcome, RangeTask, TaskOutcome, block_ranges, check_task, failure_text, range_task,
)

if TYPE_CHECKING:
    from distributed import Client, Future

INSTALL_HINT = "--scheduler needs Dask, which is not installed: pip install 'capsem-core[fleet]'"
START_TOPIC = "capsem-fleet-start"
# Tasks whose ledger is gone or unreadable answer with an error, not an exception, so a
# retry is only for a task that raised (a worker's own trouble): two more tries.
DEFAULT_RETRIES = 2


class DaskMissing(ImportError):
    """``--scheduler`` was given, and Dask is not installed (``INSTALL_HINT``)."""


def require_dask() -> None:
    """Raise DaskMissing (with the one-line install hint) unless dask.distributed imports."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise DaskMissing(INSTALL_HINT) from None


@contextlib.contextmanager
def connect(address: str, *, workers: int) -> Iterator[Client]:
    """A client of the scheduler at ``address`` (``tcp://host:port``), or of a LocalCluster
    of ``workers`` single-threaded worker processes started here (``address == "local"``,
    on 127.0.0.1, no dashboard), closed (and the cluster stopped) on exit."""
    require_dask()
    from distributed import Client, LocalCluster

    if address == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,  # type: ignore[no-untyped-call]
                               host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
            yield client
    else:
        with Client(address, timeout="30s") as client:  # type: ignore[no-untyped-call]
            yield client


def slots_by_host(client: Client) -> dict[str, int]:
    """Per host, how many tasks the cluster's workers there run at once (their threads)."""
    slots: dict[str, int] = defaultdict(int)
    for worker in client.scheduler_info().get("workers", {}).values():
        slots[str(worker.get("host"))] += int(worker.get("nthreads") or 1)
    return dict(slots)


def _logged(fn: Callable[[Any], Any], task: Any, slots: dict[str, int]) -> Any:
    """Run ``fn(task)`` on a worker, first logging the start on the scheduler (the count of
    starts per task is how a report knows it ran more than once), with its share of the
    worker's host as its thread budget (``slots``: per host, the tasks run there at once; a
    host that joined after the run began counts this worker's own threads)."""
    from distributed import get_worker
    from distributed.comm.addressing import get_address_host

    worker = get_worker()
    worker.log_event(START_TOPIC, {"key": str(worker.get_current_task())})
    here = slots.get(get_address_host(worker.address), worker.state.nthreads)
    with cores.limit(cores.share(here)):
        return fn(task)


@dataclass(slots=True)
class _Ledger:
    """One ledger's tasks and what they answered."""

    ledger: FleetLedger
    check: TaskOutcome | None = None
    ranges: list[RangeOutcome | None] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    pending: int = 0
    split: bool = False


def run_on_cluster(client: Client, ledgers: Sequence[FleetLedger], options: dict[str, Any], *,
                   split: bool, range_bytes: int, retries: int = DEFAULT_RETRIES,
                   on_result: Callable[[LedgerResult], None] | None = None) -> list[LedgerResult]:
    """Check every ledger on the cluster ``client`` is connected to; results in the order
    of ``ledgers``. ``split``: the options allow a verify split into block ranges."""
    from distributed import as_completed

    run = uuid.uuid4().hex[:12]
    slots = slots_by_host(client)
    state = [_Ledger(ledger) for ledger in ledgers]
    meta: dict[str, tuple[int, int]] = {}  # key -> (ledger, range index or -1 for the check)
    results: list[LedgerResult | None] = [None] * len(ledgers)

    def submit(fn: Callable[[Any], Any], task: Any, key: str, i: int, j: int) -> Future[Any]:
        meta[key] = (i, j)
        state[i].keys.append(key)
        state[i].pending += 1
        return client.submit(_logged, fn, task, slots, key=key, retries=retries, priority=state[i].ledger.size)

    futures = []
    for i in sorted(range(len(ledgers)), key=lambda k: -ledgers[k].size):
        s = state[i]
        s.split = bool(split and options.get("verify_bodies") and s.ledger.archive_size > range_bytes)
        if s.split:
            whole = {k: v for k, v in options.items() if k != "verify_bodies"}
            futures.append(submit(check_task, LedgerTask(s.ledger.db_path, whole), f"capsem-check-{run}-{i}", i, -1))
            spans = block_ranges(s.ledger.archive_size, range_bytes)
            s.ranges = [None] * len(spans)
            for j, (lo, hi) in enumerate(spans):
                futures.append(submit(range_task, RangeTask(s.ledger.db_path, lo, hi), f"capsem-range-{run}-{i}-{j}",
                                      i, j))
        else:
            futures.append(submit(check_task, LedgerTask(s.ledger.db_path, options), f"capsem-check-{run}-{i}", i, -1))

    done = as_completed(futures)  # type: ignore[no-untyped-call]
    for future in done:
        i, j = meta[str(future.key)]
        s = state[i]
        s.pending -= 1
        answer = _answer(future, s.ledger, j)
        if j < 0:
            assert isinstance(answer, TaskOutcome)
            s.check = answer
        else:
            assert isinstance(answer, RangeOutcome)
            s.ranges[j] = answer
        future.release()
        if s.pending:
            continue
        result = _finish(s)
        if result is None:
            # The ranges could not stand for one verify (a range unreadable, or the ledger
            # changed meanwhile): check it again as one task.
            s.split = False
            again = submit(check_task, LedgerTask(s.ledger.db_path, options), f"capsem-again-{run}-{i}", i, -1)
            done.add(again)  # type: ignore[no-untyped-call]
            continue
        results[i] = result
        if on_result is not None:
            on_result(result)
    _attempts(client, state, results)
    return [r for r in results if r is not None]


def _answer(future: Future[Any], ledger: FleetLedger, j: int) -> TaskOutcome | RangeOutcome:
    """A task's answer; a task that failed for good (raised past its retries, or killed every
    worker that took it) becomes the answer of a ledger that could not be checked."""
    from distributed import KilledWorker

    try:
        value: TaskOutcome | RangeOutcome = future.result()
        return value
    except KilledWorker as exc:
        text = f"every worker that took its check died (the last: {exc.last_worker.address})"
    except Exception as exc:  # the task's own failure, after its retries
        text = failure_text(exc)
    message = f"{ledger.db_path}: {text}"
    return TaskOutcome(None, message, 0.0, "") if j < 0 else RangeOutcome(error=message)


def _finish(s: _Ledger) -> LedgerResult | None:
    check = s.check
    assert check is not None
    seconds = check.seconds
    report = check.report
    if s.split and report is not None:
        ranges = [r for r in s.ranges if r is not None]
        seconds += sum(r.seconds for r in ranges)
        report = merge_split(report, ranges)
        if report is None:
            return None
    return LedgerResult(s.ledger, report, check.error, seconds, check.worker or None,
                        tasks=1 + (len(s.ranges) if s.split else 0))


def _attempts(client: Client, state: Sequence[_Ledger], results: Sequence[LedgerResult | None]) -> None:
    """Per ledger: how many times its tasks started, and why any ran again (from the start
    events the tasks logged and the scheduler's record of the workers it lost)."""
    starts: dict[str, int] = defaultdict(int)
    for _, msg in client.get_events(START_TOPIC):
        starts[str(msg.get("key"))] += 1
    lost: dict[str, list[str]] = defaultdict(list)
    for _, msg in client.get_events("all"):
        if isinstance(msg, dict) and msg.get("action") == "remove-worker" and not msg.get("expected"):
            for key in msg.get("processing-tasks") or ():
                lost[str(key)].append(str(msg.get("worker")))
    for s, result in zip(state, results):
        if result is None:
            continue
        retried: list[str] = []
        attempts = 0
        for key in s.keys:
            died = lost.get(key, [])
            attempts += max(starts.get(key, 0), 1 + len(died))
            what = "a block range" if "-range-" in key else "its check"
            retried += [f"worker {w} died while it held {what}; run again" for w in died]
            raised = starts.get(key, 0) - 1 - len(died)
            if raised > 0:
                retried.append(f"{what} raised and was retried {raised} time{'s' if raised != 1 else ''}")
            if key.startswith("capsem-again-"):
                retried.append("its block ranges could not be joined (one unreadable, or the ledger changed "
                               "meanwhile); checked again as one task")
        result.attempts = max(attempts, 1)
        result.retried = retried


__all__ = ["DEFAULT_RETRIES", "INSTALL_HINT", "START_TOPIC", "DaskMissing", "connect", "require_dask",
           "run_on_cluster"]
