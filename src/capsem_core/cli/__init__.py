"""The ``capsem-ledger`` command line: ``app`` wires one module per command, ``terminal``
owns how text reaches a terminal, ``errors`` how a command gives up.

``main`` is the entry point: it imports the command asked for itself (only that one), so that
a Ctrl-C or SIGTERM arriving while it loads ends in the same one line and exit status as one
arriving later, never a traceback.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence


class _TerminatedEarly(BaseException):
    pass


def _terminated_early(signum: int, frame: object) -> None:
    raise _TerminatedEarly


def main(argv: Sequence[str] | None = None) -> int:
    """Run capsem-ledger with ``argv`` (default: the process's arguments); the exit status."""
    # Signal handlers belong to the main thread (a test may call main from another).
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated_early) if on_main else None
    # Nothing here multiplies matrices: numpy's OpenBLAS need not start a thread per core (and
    # spin them) in every capsem-ledger process, about 0.1 s of CPU each. A value the user set
    # is kept; a process that imported numpy already has its threads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # (Not list(argv): once the list command is loaded, this package's name "list" is it.)
    words = sys.argv[1:] if argv is None else [*argv]
    program = argv is None   # this process is capsem-ledger, not a caller of main(argv)
    try:
        from capsem_core.cli import app, startup

        if program:
            startup.begin()

        app.command_module(app.chosen_command(words))  # imported inside this guard
    except KeyboardInterrupt:
        print("capsem-ledger: interrupted", file=sys.stderr)
        return 130
    except _TerminatedEarly:
        print("capsem-ledger: terminated", file=sys.stderr)
        return 143
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, previous)
    code = app.main(words)
    if program:
        startup.end()
    return code


__all__ = ["main"]
