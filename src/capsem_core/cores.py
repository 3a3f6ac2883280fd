"""How many threads this process's work may use: the one owner of that policy.

Every parallel step (the page check, the body index scan, the verify kernel, the extent
fingerprints, bulk body reads) takes ``threads``, where 0 means "the budget". The budget is
the cores this process may run on (its CPU affinity, which a container's cpuset or
``taskset`` narrows; the native code's own fallback would count every online core), unless
it is narrowed:

* ``CAPSEM_CORE_THREADS=N`` in the environment, for whoever runs several capsem-core
  processes side by side (as ``OMP_NUM_THREADS`` is for OpenMP programs);
* ``limit(n)`` around a block of work: the fleet runners give each ledger's check its share
  of the machine (cores / checks running at once), so ``--jobs 2`` on 2 cores runs two
  one-thread checks instead of two two-thread checks fighting for the same cores.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

THREADS_ENV = "CAPSEM_CORE_THREADS"

# A context variable, not a global: a Dask worker runs several tasks at once on its threads,
# each inside its own limit. The budget is read where a step starts (the thread that calls
# the native code), so the threads a step starts itself need not see it.
_limit: contextvars.ContextVar[int | None] = contextvars.ContextVar("capsem_core_threads", default=None)


def available() -> int:
    """The cores this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (macOS)
        return max(1, os.cpu_count() or 1)


def budget() -> int:
    """The threads one parallel step may use now: ``limit``'s, else ``CAPSEM_CORE_THREADS``'s
    (a cap: never more than ``available()``; a value that is not a positive integer is
    ignored), else ``available()``."""
    limited = _limit.get()
    if limited is not None:
        return limited
    text = os.environ.get(THREADS_ENV, "").strip()
    if text.isdigit() and int(text) > 0:
        # Capped: each page-check thread holds a connection of its own, so a large value on
        # a small machine would open that many for nothing.
        return min(int(text), available())
    return available()


def threads(requested: int | None) -> int:
    """``requested`` when it is positive, else the budget: what a step with a ``threads=0``
    default hands the native code."""
    return requested if requested is not None and requested > 0 else budget()


# The most threads any call may ask for: far above any machine's cores, and low enough that
# what is sized from it (a connection per page-check worker) stays small.
MAX_THREADS = 256


def checked(value: object, name: str = "threads") -> int:
    """A ``threads=`` argument as given, checked: an int (not a bool) from 0 (one per core)
    to MAX_THREADS; TypeError or ValueError naming ``name`` otherwise."""
    if type(value) is not int:
        raise TypeError(f"{name} is an int (0: one per core), not {type(value).__name__}")
    if not 0 <= value <= MAX_THREADS:
        raise ValueError(f"{name} is 0 (one per core) to {MAX_THREADS}, not {value}")
    return value


def share(slots: int) -> int:
    """This process's share of the machine when ``slots`` checks run on it at once."""
    return max(1, available() // max(1, slots))


@contextlib.contextmanager
def limit(n: int) -> Iterator[None]:
    """Within the block, on this thread, the budget is ``n`` (at least 1)."""
    token = _limit.set(max(1, int(n)))
    try:
        yield
    finally:
        _limit.reset(token)


__all__ = ["MAX_THREADS", "THREADS_ENV", "available", "budget", "checked", "limit", "share", "threads"]
