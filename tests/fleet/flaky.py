"""A worker preload for the cluster tests: each ledger's check raises the first time a
worker runs it (a worker's own trouble, which Dask retries), and runs for real after.

Dask unpickles a task's function by its module and name, so replacing
``capsem_core.fleet.task.check_task`` here is what the worker runs. Which ledgers have
raised once is kept as files in ``$CAPSEM_TEST_FLAKY_DIR``, shared by every worker."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from capsem_core.fleet import task

# Dask may run a preload more than once in a worker: wrap the real check, never a wrapper.
_real = getattr(task.check_task, "__wrapped__", task.check_task)


def _raise_once(job: task.LedgerTask) -> task.TaskOutcome:
    mark = Path(os.environ["CAPSEM_TEST_FLAKY_DIR"]) / hashlib.sha256(bytes(job.db_path)).hexdigest()
    try:
        mark.touch(exist_ok=False)
    except FileExistsError:
        return _real(job)
    raise RuntimeError("this worker's first try at the ledger broke")


_raise_once.__wrapped__ = _real  # type: ignore[attr-defined]
task.check_task = _raise_once
