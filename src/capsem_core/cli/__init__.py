"""The ``capsem-ledger`` command line: ``app`` wires one module per command, ``terminal``
owns how text reaches a terminal, ``errors`` how a command gives up.

``main`` is the entry point: it imports the command asked for itself (only that one), and
handles a Ctrl-C, SIGTERM or SIGHUP from before it loads the command to after the command
returns, so that one arriving while it loads or while the arguments are parsed ends in the
same one line and exit status as one arriving later, never a traceback or a silent death.
The package and this module import nothing that is not loaded with the interpreter already,
so the window before that handling starts is the interpreter's own start.
"""

from __future__ import annotations

import os
import sys

from capsem_core.cli.errors import Terminated, interrupted, on_termination, restore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
del TYPE_CHECKING


def main(argv: Sequence[str] | None = None) -> int:
    """Run capsem-ledger with ``argv`` (default: the process's arguments); the exit status."""
    # Nothing here multiplies matrices: numpy's OpenBLAS need not start a thread per core (and
    # spin them) in every capsem-ledger process, about 0.1 s of CPU each. A value the user set
    # is kept; a process that imported numpy already has its threads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # (Not list(argv): once the list command is loaded, this package's name "list" is it.)
    words = sys.argv[1:] if argv is None else [*argv]
    program = argv is None   # this process is capsem-ledger, not a caller of main(argv)
    previous: list[tuple[int, object]] = []
    try:
        # (Signal handlers belong to the main thread: a test may call main from another.)
        previous = on_termination()
        from capsem_core.cli import streams

        streams.fill_closed()   # before any file is opened: none may become stdout or stderr
        from capsem_core.cli import app, startup

        if program:
            startup.begin()

        app.command_module(app.chosen_command(words))  # imported inside this guard
        # Still inside it: app.main installs the same handlers around its own work, and a
        # signal just before it does or after it has put them back is handled alike.
        code = app.main(words)
        if program:
            startup.end()
        return code
    except KeyboardInterrupt:
        print("capsem-ledger: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print("capsem-ledger: terminated", file=sys.stderr)
        return exc.exit_status
    except ImportError as exc:
        # A Ctrl-C inside a native module's import comes out as its ImportError (numpy's).
        if not interrupted(exc):
            raise
        print("capsem-ledger: interrupted", file=sys.stderr)
        return 130
    finally:
        restore(previous)


__all__ = ["main"]
