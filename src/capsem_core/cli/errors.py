"""How a command says it cannot go on: the two exceptions the CLI turns into exit codes.

Library code raises LedgerError for what is wrong with a file; these two are the command
line's own: contradictory arguments, and SIGTERM or SIGHUP turned into an exception so that
writers' exit paths run as they do for Ctrl-C. ``on_termination`` is the one place those
signals get their handler.
"""

from __future__ import annotations

TYPE_CHECKING = False   # typing itself is not loaded at start (see cli/__init__)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Handler = Callable[[int, Any], Any]
del TYPE_CHECKING

# The signals that ask a command to end, by number (the same on Linux and macOS; ``signal``
# itself is imported only when a handler is set, as the package loads nothing more at start):
# SIGTERM (kill, a service manager) and SIGHUP (the terminal or ssh session went away).
SIGHUP, SIGTERM = 1, 15
TERMINATING = (SIGTERM, SIGHUP)


class UsageError(Exception):
    """Arguments that parse but contradict each other: the CLI prints the subcommand's
    usage line and this message, and exits 2 (argparse's status for usage errors)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised as an exception in every command on the main thread (a
    BaseException, like Ctrl-C's). ``signum`` says which; the exit status is 128 + it (143,
    129), as a shell reports a process the signal ended."""

    def __init__(self, signum: int = SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def raise_terminated(signum: int, frame: object) -> None:
    """The handler of the terminating signals: the signal as ``Terminated``."""
    raise Terminated(signum)


def on_termination(handler: Handler = raise_terminated) -> list[tuple[int, Any]]:
    """Give SIGTERM and SIGHUP ``handler`` (main thread only: elsewhere nothing changes) and
    return what they had, for ``restore``. A SIGHUP that is ignored (``nohup``) stays ignored:
    the user asked the command to outlive its terminal."""
    import signal
    import threading

    previous: list[tuple[int, Any]] = []
    if threading.current_thread() is not threading.main_thread():
        return previous
    for signum in TERMINATING:
        if signum == SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        previous.append((signum, signal.signal(signum, handler)))
    return previous


def restore(previous: list[tuple[int, Any]]) -> None:
    """Put back the handlers ``on_termination`` replaced."""
    import signal

    for signum, handler in reversed(previous):
        signal.signal(signum, handler)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` came of a Ctrl-C, SIGTERM or SIGHUP: one itself, or an error raised
    while one was being handled (a native module's import turns it into its own ImportError:
    numpy's)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated)):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


__all__ = ["TERMINATING", "Terminated", "UsageError", "interrupted", "on_termination", "raise_terminated", "restore"]
