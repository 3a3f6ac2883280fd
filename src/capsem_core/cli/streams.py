"""Standard output and standard error as a command finds them: closed, full or gone.

A command started with a standard descriptor closed (``>&-``, ``2>&-``) has ``sys.stdout``
or ``sys.stderr`` None: a print to stdout would be an AttributeError's traceback, and
``print(file=sys.stderr)`` falls back to stdout, so error lines would land in ``--json``
output. Worse, the next file opened (a ledger) would take the free descriptor and become
what native code and child processes write "stdout" or "stderr" into. So ``fill_closed``
(the front door's first act) puts /dev/null on each closed one, and ``guarded`` (around the
command) gives Python streams for them: stderr's lines are dropped, stdout says it is closed
on the first write (the command fails in one line, exit 1: output was expected and none could
be given). And a write to stdout that fails (a full disk, ``/dev/full``) names standard
output, as a failure of a file names it.
"""

from __future__ import annotations

import errno
import io
import os
import sys

from capsem_core.paths import STDOUT_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any
del TYPE_CHECKING


_own_stdout = False   # whether the stdout guarded is the process's own (descriptor 1)


def fill_closed() -> None:
    """/dev/null on each standard descriptor that is closed, so that no file opened later
    takes it: before anything else opens a file (the front door calls this first). Stdout's
    is read-only, so a child process writing to it fails as this one does."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)

def named(exc: OSError) -> OSError:
    """``exc``, a failed write to standard output, naming it (as a failed file names its path)."""
    if exc.filename is None:
        exc.filename = STDOUT_NAME
    return exc


class _Named:
    """Standard output (or its buffer), whose write failures name it; all else is the stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @property
    def buffer(self) -> _Named:
        return _Named(self._stream.buffer)

    def write(self, data: Any) -> int:
        try:
            return int(self._stream.write(data))
        except OSError as exc:
            raise named(exc) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise named(exc) from None


class _Closed:
    """Standard output closed before the command started: every write fails at once, naming it
    (its descriptor holds a read-only /dev/null, which a child process fails to write too)."""

    encoding = "utf-8"
    errors = "strict"

    @property
    def buffer(self) -> _Closed:
        return self

    def write(self, data: Any) -> int:
        raise OSError(errno.EBADF, "it is closed", STDOUT_NAME)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass   # nothing was written

    def fileno(self) -> int:
        # None to write to past this stream (it is a read-only /dev/null): io's own answer
        # for a stream without one, so a writer falls back to write() and hears why.
        raise io.UnsupportedOperation("standard output is closed")

    def isatty(self) -> bool:
        return False


class guarded:
    """The command's standard streams, as the module says, while the ``with`` block runs; the
    caller's as they were afterwards (a program calling ``main(argv)`` keeps its own). (A
    class, not contextlib's: the front door imports nothing it need not.)"""

    def __enter__(self) -> None:
        global _own_stdout
        fill_closed()
        self.saved = sys.stdout, sys.stderr
        _own_stdout = sys.stdout is not None and sys.stdout is sys.__stdout__
        # None: the descriptor was closed when the interpreter started (fill_closed has it now).
        sys.stdout = _Closed() if sys.stdout is None else _Named(sys.stdout)
        if sys.stderr is None:
            sys.stderr = open(os.devnull, "w")   # its lines dropped, never sent to stdout

    def __exit__(self, *exc: object) -> None:
        if self.saved[1] is None and sys.stderr is not None:
            sys.stderr.close()   # the devnull opened above: not left to the collector
        sys.stdout, sys.stderr = self.saved


def failed_on_stdout(exc: OSError) -> bool:
    """Whether ``exc`` is a write to standard output failing."""
    return bool(exc.filename == STDOUT_NAME)


def discard_stdout() -> None:
    """Standard output failed or its reader went away: what is still buffered for it goes
    nowhere, so the interpreter's own last flush at exit has nothing to complain of. Only
    the process's own: a caller of ``main(argv)`` that replaced stdout keeps its own."""
    if not _own_stdout:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


__all__ = ["STDOUT_NAME", "discard_stdout", "failed_on_stdout", "fill_closed", "guarded", "named"]
