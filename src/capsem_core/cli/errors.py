"""How a command says it cannot go on: the two exceptions the CLI turns into exit codes.

Library code raises LedgerError for what is wrong with a file; these two are the command
line's own: contradictory arguments, and SIGTERM turned into an exception so that writers'
exit paths run as they do for Ctrl-C.
"""

from __future__ import annotations


class UsageError(Exception):
    """Arguments that parse but contradict each other: the CLI prints the subcommand's
    usage line and this message, and exits 2 (argparse's status for usage errors)."""


class Terminated(BaseException):
    """SIGTERM, raised as an exception in every command on the main thread (a BaseException,
    like Ctrl-C's)."""


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` came of a Ctrl-C or SIGTERM: one itself, or an error raised while one
    was being handled (a native module's import turns it into its own ImportError: numpy's)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated)):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


__all__ = ["Terminated", "UsageError", "interrupted"]
