"""What a capsem-ledger process does with Python's garbage collector while it starts and ends.

Loading a command creates tens of thousands of long-lived objects (numpy, the check package,
their classes and functions) and frees almost none, so every collection while they load
traverses them and finds nothing; the interpreter's final collections at exit traverse them
again. Together that is about a tenth of a check of a small ledger. So, in the process's own
entry only (``begin``), a collection waits for many more allocations than usual while the
command loads; once its modules are loaded (``loaded``, which a command calls after its
imports, and the command line calls when the command returns) what was loaded is frozen out
of every later collection (``gc.freeze``: still freed when no longer referenced, never
traversed) and the usual thresholds return; at exit (``end``) whatever is left is frozen too.
A program that calls ``capsem_core.cli.main(argv)`` keeps its collector as it set it.
"""

from __future__ import annotations

import gc

# Allocations (less deallocations) before the youngest generation is collected while a
# command loads: more than loading the check command makes, so none runs meanwhile; a command
# that never says it has loaded still collects, only less often.
LOADING_THRESHOLD = 200_000

_usual: tuple[int, int, int] | None = None


def begin() -> None:
    """The process starts loading a command: collections wait (see the module)."""
    global _usual
    if _usual is None:
        _usual = gc.get_threshold()
        gc.set_threshold(LOADING_THRESHOLD, _usual[1], _usual[2])


def loaded() -> None:
    """The command's modules are loaded: freeze them out of collections and collect as usual
    from now on. Does nothing outside ``begin`` (a caller's own ``main(argv)``)."""
    global _usual
    if _usual is not None:
        gc.freeze()
        gc.set_threshold(*_usual)
        _usual = None


def end() -> None:
    """The process is about to exit: the interpreter's final collections need not traverse
    what is left (it is freed with the process)."""
    loaded()
    gc.freeze()


__all__ = ["LOADING_THRESHOLD", "begin", "end", "loaded"]
