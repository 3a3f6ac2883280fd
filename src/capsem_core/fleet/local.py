"""The local runner: every task in a process of its own, at most ``jobs`` at a time.

A ledger's check runs native code over files that may be damaged or hostile; if it ever
crashes (a signal, an abort, the kernel's OOM killer), only that ledger's process dies, and
its result says how ("unreadable"), while the other ledgers go on. A process pool would
lose every queued task with one dead worker, so each task gets a fresh process, forked from
a fork server that has capsem_core imported already (a few milliseconds each, not an
interpreter start), which answers through a pipe of its own. Ctrl-C or SIGTERM in the
parent kills the running checks (they only read) and waits for them. Each process gets its
share of the machine as its thread budget (``capsem_core.cores``): cores / jobs.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from capsem_core import cores

T = TypeVar("T")
R = TypeVar("R")

# Imported once by the fork server, so each task's process starts with the checks loaded.
_PRELOAD = ["capsem_core.fleet.preload"]


@dataclass(frozen=True, slots=True)
class ProcessDied:
    """A task's process ended without an answer: how (``exitcode``, negative for a signal)."""

    exitcode: int | None
    not_started: str | None = None   # why its process could not be started at all

    def describe(self) -> str:
        if self.not_started is not None:
            return f"its check process could not be started ({self.not_started}); it was not checked"
        if self.exitcode is not None and self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"its check process was killed by {name}"
        return f"its check process exited with status {self.exitcode} and no result"


@dataclass(frozen=True, slots=True)
class TaskRaised:
    """A task raised instead of answering: its one-line description."""

    text: str


def default_jobs() -> int:
    """One job per core this process may run on."""
    return cores.available()


def _context() -> multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _child(conn: Connection, fn: Callable[[Any], Any], arg: Any, threads: int) -> None:
    try:
        with cores.limit(threads):
            result: Any = fn(arg)
    except BaseException as exc:  # the parent hears of every failure, in one line
        from capsem_core.fleet.task import failure_text

        result = TaskRaised(failure_text(exc))
    try:
        conn.send(result)
        conn.close()
    except OSError:
        # The parent stopped listening (it was interrupted and is ending its run): there is
        # no one to answer, and nothing of this process may reach the terminal.
        os._exit(1)
    # Nothing of this process outlives its answer: leave at once, without the interpreter's
    # teardown (freeing every module of a warm process costs more than the fork did).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _not_started(exc: BaseException) -> str:
    """Why a start failed, naming the interpreter the fork server runs: the usual cause of a
    server that never answers is an executable this user cannot run (or that is gone)."""
    from multiprocessing import spawn

    return f"its fork server, {os.fsdecode(spawn.get_executable())}, did not answer: {str(exc) or type(exc).__name__}"


@dataclass(slots=True)
class _Running(Generic[T]):
    index: int
    process: BaseProcess
    conn: Connection


def run_each(fn: Callable[[T], R], args: Sequence[T], *, jobs: int,
             on_done: Callable[[int, R | ProcessDied | TaskRaised], None] | None = None
             ) -> list[R | ProcessDied | TaskRaised]:
    """``fn(arg)`` for every arg, each in its own process, ``jobs`` at a time, in the order
    given; returns the answers in that order (a ``ProcessDied`` or ``TaskRaised`` in place of
    an answer that never came). ``fn`` must be importable by name (a module-level function).
    ``on_done(i, answer)`` is called in this process as each one ends. Each task's thread
    budget is its share of the cores: ``cores.share(jobs)``, at least 1."""
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    threads = cores.share(jobs)
    ctx = _context()
    out: list[R | ProcessDied | TaskRaised | None] = [None] * len(args)
    running: dict[int, _Running[T]] = {}
    queue = list(range(len(args)))
    queue.reverse()  # pop() from the end takes them in order

    def finish(run: _Running[T], answer: R | ProcessDied | TaskRaised) -> None:
        run.process.join()
        run.conn.close()
        run.process.close()
        del running[run.index]
        out[run.index] = answer
        if on_done is not None:
            on_done(run.index, answer)

    try:
        while queue or running:
            while queue and len(running) < jobs:
                i = queue.pop()
                parent_end, child_end = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_child, args=(child_end, fn, args[i], threads), daemon=True,
                                      name=f"capsem-fleet-{i}")
                try:
                    process.start()
                except (OSError, EOFError) as exc:
                    # The fork server is gone (killed, or it could not start): this task is
                    # counted as not checked; the next start launches a fresh server.
                    parent_end.close()
                    child_end.close()
                    out[i] = ProcessDied(None, _not_started(exc))
                    if on_done is not None:
                        on_done(i, out[i])   # type: ignore[arg-type]
                    continue
                child_end.close()  # the child holds the only writer: EOF when it dies
                running[i] = _Running(i, process, parent_end)
            if not running:
                # Every start left failed (a fork server that cannot start fails each one):
                # there is nothing to wait for, and waiting on nothing never returns.
                continue
            waitable: list[Any] = [r.conn for r in running.values()]
            ready = multiprocessing.connection.wait(waitable)
            for run in [r for r in list(running.values()) if r.conn in ready]:
                try:
                    answer: Any = run.conn.recv()
                except (EOFError, OSError):
                    run.process.join()
                    answer = ProcessDied(run.process.exitcode)
                finish(run, answer)
    except BaseException:
        for run in running.values():
            if run.process.is_alive():
                run.process.kill()
        for run in running.values():
            run.process.join()
            run.conn.close()
        raise
    answers: list[R | ProcessDied | TaskRaised] = []
    for a in out:
        if a is None:
            raise RuntimeError("a task of the local runner ended without an answer")
        answers.append(a)
    return answers


__all__ = ["ProcessDied", "TaskRaised", "default_jobs", "run_each"]
