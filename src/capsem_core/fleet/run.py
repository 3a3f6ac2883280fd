"""``check_all``: check every ledger of a fleet, on this machine or on a Dask cluster.

The ledgers come from ``discover`` (a home's run directory, directory trees) or are given;
each is checked by ``check_ledger`` with the same options ``check`` takes (``task.py``). With
no client the local runner checks them in a process each, ``jobs`` at a time (``local.py``);
with a ``distributed.Client`` its cluster does, splitting the verify of large ledgers into
block ranges (``cluster.py``). Either way the results are one ``LedgerResult`` per ledger,
in discovery order, and equal: the same report for the same ledger.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from capsem_core.fleet.discover import MAX_TREE_DEPTH, Discovery, FleetLedger, discover
from capsem_core.fleet.local import ProcessDied, TaskRaised, default_jobs, run_each
from capsem_core.fleet.results import FleetReport, LedgerResult
from capsem_core.fleet.task import TaskOutcome, check_options, check_task, splittable, task_for
from capsem_core.sessions.home import Home

if TYPE_CHECKING:
    from distributed import Client

# A ledger whose archive is larger than this is verified as block ranges of about this many
# bytes on a cluster: a 1 GiB archive verifies in about a second on one core, so a range is a
# task of a few hundred milliseconds, long beside Dask's own cost per task (about 1 ms).
DEFAULT_RANGE_BYTES = 256 << 20

Progress = Callable[[LedgerResult], None]


def check_all(paths: Iterable[os.PathLike[str] | str | FleetLedger] = (), *,
              home: Home | os.PathLike[str] | str | bool = False, verify_bodies: bool = False,
              incremental: bool = False, rows: int = 5, jobs: int | None = None, client: Client | None = None,
              range_bytes: int = DEFAULT_RANGE_BYTES, retries: int | None = None, max_depth: int = MAX_TREE_DEPTH,
              progress: Progress | None = None, **check_kwargs: Any) -> FleetReport:
    """Check every ledger of ``paths`` and of ``home``; one ``LedgerResult`` each, in
    discovery order, in the returned ``FleetReport``.

    paths: ledger directories, ``session.db`` files, homes or trees holding any of them
    (searched without following symbolic links, at most ``max_depth`` deep), or
    ``FleetLedger`` values as ``discover`` gives them. home: True for the home the
    environment names (``CAPSEM_HOME``, ``CAPSEM_RUN_DIR``), or a home's path; its ephemeral
    and persistent ledgers are checked with their session ids and names.

    verify_bodies, rows and any other keyword ``check_ledger`` takes (``options=``,
    ``page_threads=``) reach it unchanged; one it does not take raises ``UnsupportedOption``
    before anything runs. incremental, and ``subset=`` (a ``capsem_core.check.subset.Subset``)
    and ``max_age=`` (seconds), are the verify options of ``check --all``: they reach every
    ledger's check as one ``VerifyOptions`` (``ValueError`` beside ``options=``, or for
    ``max_age`` without incremental). jobs: local processes at once (default: one
    per core). client: a ``distributed.Client``; its cluster runs the checks instead, the
    verify of a ledger whose archive exceeds ``range_bytes`` split into block ranges, a
    task that raised retried ``retries`` times. ``progress(result)`` is called here as each
    ledger is done.

    A ledger that cannot be checked (removed meanwhile, unreadable, its process crashed) is
    a result with ``error`` and verdict "unreadable", never an exception of the run; a
    directory that cannot be read, and a path that does not exist, is in the report's
    ``unchecked`` (and the report is not ``sound``).
    """
    _verify_options(incremental, check_kwargs)
    options = check_options(rows=rows, verify_bodies=verify_bodies, **check_kwargs)
    began = time.perf_counter()
    given = [p for p in paths]
    found = discover([p for p in given if not isinstance(p, FleetLedger)], home=home, max_depth=max_depth)
    ledgers = _ledgers(given, found)
    if client is not None:
        from capsem_core.fleet import cluster

        workers = sum(w.get("nthreads", 1) for w in client.scheduler_info(n_workers=-1)["workers"].values())
        results = cluster.run_on_cluster(client, ledgers, options, split=splittable(options),
                                         range_bytes=range_bytes,
                                         retries=cluster.DEFAULT_RETRIES if retries is None else retries,
                                         on_result=progress)
        runner = str(client.scheduler.address) if client.scheduler is not None else "dask"
        return FleetReport(results, found.notes, time.perf_counter() - began, runner, workers, found.unchecked)
    jobs = default_jobs() if jobs is None else jobs
    results = run_locally(ledgers, options, jobs=jobs, progress=progress)
    return FleetReport(results, found.notes, time.perf_counter() - began, "local", jobs, found.unchecked)


def _verify_options(incremental: bool, check_kwargs: dict[str, Any]) -> None:
    """Fold incremental, subset and max_age into check_ledger's one ``options`` value."""
    subset = check_kwargs.pop("subset", None)
    max_age = check_kwargs.pop("max_age", None)
    if not incremental and subset is None and max_age is None:
        return
    if check_kwargs.get("options") is not None:
        raise ValueError("give incremental, subset and max_age, or options=VerifyOptions(...), not both")
    from capsem_core.check.incremental import VerifyOptions

    check_kwargs["options"] = VerifyOptions(incremental=incremental, subset=subset, max_age=max_age)


def _records_here(options: dict[str, Any]) -> dict[str, Any]:
    """The verify options with their record directory decided in this process. The checks run
    in processes forked from a fork server started once per interpreter, which keeps the
    environment it started with: a ``CAPSEM_CORE_VERIFIED_DIR`` set since would not reach them."""
    verify = options.get("options")
    if verify is None or verify.record_dir is not None:
        return options
    from capsem_core.check.record import record_dir

    return {**options, "options": dataclasses.replace(verify, record_dir=record_dir())}


def _ledgers(given: list[os.PathLike[str] | str | FleetLedger], found: Discovery) -> list[FleetLedger]:
    explicit = Discovery()
    for item in given:
        if isinstance(item, FleetLedger):
            explicit.add(item)
    for ledger in found.ledgers:
        explicit.add(ledger)
    return explicit.ledgers


def run_locally(ledgers: list[FleetLedger], options: dict[str, Any], *, jobs: int,
                progress: Progress | None = None) -> list[LedgerResult]:
    """Each ledger's check in a process of its own, ``jobs`` at a time, largest first; a
    process that died or raised makes its ledger unreadable, saying how."""
    order = sorted(range(len(ledgers)), key=lambda i: -ledgers[i].size)
    options = _records_here(options)
    tasks = [task_for(ledgers[i], options) for i in order]
    results: list[LedgerResult | None] = [None] * len(ledgers)

    def done(k: int, answer: TaskOutcome | ProcessDied | TaskRaised) -> None:
        ledger = ledgers[order[k]]
        if isinstance(answer, TaskOutcome):
            result = LedgerResult(ledger, answer.report, answer.error, answer.seconds, answer.worker)
        elif isinstance(answer, ProcessDied):
            result = LedgerResult(ledger, None, f"{ledger.db_path}: {answer.describe()}")
        else:
            result = LedgerResult(ledger, None, f"{ledger.db_path}: its check failed: {answer.text}")
        results[order[k]] = result
        if progress is not None:
            progress(result)

    run_each(check_task, tasks, jobs=jobs, on_done=done)
    return [r for r in results if r is not None]


__all__ = ["DEFAULT_RANGE_BYTES", "Progress", "check_all", "run_locally"]
