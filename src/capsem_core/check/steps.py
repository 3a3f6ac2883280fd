"""The one small scheduler of a check: declared steps, run on the cores, each when what it
needs is done.

A ``Step`` names what it needs (other steps, by name) and where it runs: on the checks' own
connection, on the calling thread, in the order declared (``pool=False``: the doctor's order,
as far as what each step needs lets it), or on any connection of the snapshot (``pool=True``:
the worker threads take the ready ones, the costliest first). ``run`` is called as
``run(conn, *results of needs)``. The calling thread, when the next steps it owns wait on pool
steps no worker has taken yet, runs those itself on its own connection (same snapshot), and
once its own steps are done it helps with what is left, so no core waits on a queue.

A ``transient`` step's result (a large array, say) is dropped once every step needing it has
settled, and its ``release`` called then (to drop what else holds it), so a check's peak
memory holds what its running steps need, not every step's result. ``Outcome.results`` holds
None for it.

A step that raises ends the check's other work: nothing more is started but the ``verdict``
steps (the page check, whose damage decides what the report says), which run to their end;
a step whose need failed is not run. ``run`` returns every result and every failure by step
name; it raises only what interrupts it (Ctrl-C, or an interrupt a step raised on a worker),
after stopping every step still running (``interrupt``) and joining the workers.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple


class Step(NamedTuple):
    """One declared step (see the module). A named tuple: defining it as a frozen dataclass
    cost every capsem-ledger start 1.5 ms, a tenth of what a small check does."""

    name: str
    run: Callable[..., Any]
    needs: tuple[str, ...] = ()
    pool: bool = False
    cost: float = 0.0
    verdict: bool = False
    transient: bool = False
    release: Callable[[], None] | None = None


class NeedFailed(Exception):
    """A step not run because a step it needs failed or was not run."""


class Outcome(NamedTuple):
    """What a run gave: results and failures by step name."""

    results: dict[str, Any]
    failures: dict[str, BaseException]

    def first_failure(self, steps: Sequence[Step], *, verdict: bool) -> BaseException | None:
        """The first failure, in declared order, among the verdict steps or the others (a
        failure of a need is never the first: the need's own is)."""
        for step in steps:
            exc = self.failures.get(step.name)
            if exc is not None and step.verdict == verdict and not isinstance(exc, NeedFailed):
                return exc
        return None


class Scheduler:
    """Runs ``steps`` with one worker thread per connection of ``workers`` beside the caller's
    ``conn``; ``interrupt`` stops what runs when the run is torn down."""

    def __init__(self, steps: Sequence[Step], conn: sqlite3.Connection, workers: Sequence[sqlite3.Connection],
                 interrupt: Callable[[], None]) -> None:
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError("step names repeat")
        unknown = {n for s in steps for n in s.needs} - set(names)
        if unknown:
            raise ValueError(f"steps need steps not declared: {sorted(unknown)}")
        self._steps = list(steps)
        self._by_name = {s.name: s for s in steps}
        self._conn = conn
        self._workers = list(workers)
        self._interrupt = interrupt
        self._cond = threading.Condition()
        self._taken: set[str] = set()
        self._done: dict[str, Any] = {}
        self._failed: dict[str, BaseException] = {}
        self._stopping = False    # a failure: only verdict steps start
        self._torn_down = False   # interrupted: nothing starts
        self._needed_by_step = {s.name: [t.name for t in steps if s.name in t.needs] for s in steps}
        self._released: set[str] = set()
        self._unreleased: list[Callable[[], None]] = []   # release hooks of steps settled unrun
        self._escaped: BaseException | None = None   # an interrupt raised in a step on a worker

    # --- under the lock ------------------------------------------------------------------

    def _settled(self, name: str) -> bool:
        return name in self._done or name in self._failed

    def _ready(self, step: Step) -> bool:
        return step.name not in self._taken and all(self._settled(n) for n in step.needs)

    def _may_start(self, step: Step) -> bool:
        return not self._torn_down and (step.verdict or not self._stopping)

    def _pool_left(self) -> bool:
        return any(s.pool and s.name not in self._taken for s in self._steps)

    def _best_pool(self, among: set[str] | None = None) -> Step | None:
        ready = [s for s in self._steps if s.pool and self._ready(s) and (among is None or s.name in among)]
        return max(ready, key=lambda s: s.cost) if ready else None

    def _needed_by(self, steps: Sequence[Step]) -> set[str]:
        """Every step the given ones need, at any depth."""
        seen: set[str] = set()
        todo = [n for s in steps for n in s.needs]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self._by_name[name].needs)
        return seen

    # --- running one step ------------------------------------------------------------------

    def _take(self, step: Step) -> bool:
        """Claim ``step`` (under the lock); False when it is settled without running: a need
        failed, or nothing may start."""
        self._taken.add(step.name)
        failed = [n for n in step.needs if n in self._failed]
        if failed or not self._may_start(step):
            why = f"{failed[0]} failed" if failed else "the check stopped"
            self._failed[step.name] = NeedFailed(f"{step.name} not run: {why}")
            # Settled too: what it alone still needed goes (its hooks run once the steps end).
            self._unreleased.extend(self._releasable(step))
            self._cond.notify_all()
            return False
        return True

    def _execute(self, step: Step, conn: sqlite3.Connection, *, worker: bool = False) -> None:
        """Run a claimed step outside the lock and settle it. An interrupt (a BaseException
        that is not an Exception) raised in it goes up from the caller's thread; on a worker
        it is settled as the step's failure and handed to the caller's thread to raise."""
        with self._cond:
            args = [self._done[n] for n in step.needs]
        try:
            value = step.run(conn, *args)
        except BaseException as exc:   # settled as its failure; the caller raises the first one
            interrupt = not isinstance(exc, Exception)
            if interrupt and not worker:
                raise
            with self._cond:
                self._failed[step.name] = exc
                if not step.verdict or interrupt:
                    self._stopping = True
                if interrupt and self._escaped is None:
                    self._escaped = exc
                releases = self._releasable(step)
                self._cond.notify_all()
        else:
            with self._cond:
                self._done[step.name] = value
                releases = self._releasable(step)
                self._cond.notify_all()
        del args
        for release in releases:
            release()

    def _releasable(self, step: Step) -> list[Callable[[], None]]:
        """(Under the lock, ``step`` just settled.) Drop the result of each transient step it
        needed that nothing unsettled needs any more; their release hooks, to call outside."""
        out = []
        for name in step.needs:
            need = self._by_name[name]
            if (need.transient and name in self._done and name not in self._released
                    and all(self._settled(t) for t in self._needed_by_step[name])):
                self._released.add(name)
                self._done[name] = None
                if need.release is not None:
                    out.append(need.release)
        return out

    def _work(self, conn: sqlite3.Connection) -> None:
        while True:
            with self._cond:
                step = None
                while not self._torn_down and self._pool_left():
                    step = self._best_pool()
                    if step is not None:
                        break
                    self._cond.wait()
                if step is None:
                    return
                if not self._take(step):
                    continue
            self._execute(step, conn, worker=True)

    # --- the caller's side ---------------------------------------------------------------

    def run(self) -> Outcome:
        """Run every step (see the module)."""
        threads = [threading.Thread(target=self._work, args=(c,), name=f"capsem-check-{i}", daemon=True)
                   for i, c in enumerate(self._workers)]
        try:
            for t in threads:
                t.start()
            self._run_own()
            self._help()
        except BaseException:
            with self._cond:
                self._torn_down = True
                self._cond.notify_all()
            self._interrupt()
            raise
        finally:
            for t in threads:
                if t.ident is not None:   # a Ctrl-C can land between a thread's creation and its start
                    t.join()
            for release in self._unreleased:
                release()
            self._unreleased.clear()
        return Outcome(dict(self._done), dict(self._failed))

    def _run_own(self) -> None:
        """The caller's steps, in declared order as far as their needs allow; while the next
        ones wait on pool steps no worker has taken, the caller runs those itself."""
        own = [s for s in self._steps if not s.pool]
        while own:
            with self._cond:
                self._raise_escaped()
                step = next((s for s in own if self._ready(s)), None)
                if step is None:
                    step = self._best_pool(self._needed_by(own))
                    if step is None:
                        self._cond.wait()
                        continue
                else:
                    own.remove(step)
                if not self._take(step):
                    continue
            self._execute(step, self._conn)

    def _help(self) -> None:
        """Once the caller's own steps are done: the pool steps left, until all are settled."""
        while True:
            with self._cond:
                self._raise_escaped()
                if all(self._settled(s.name) for s in self._steps):
                    return
                step = self._best_pool() if not self._torn_down else None
                if step is None:
                    self._cond.wait()
                    continue
                if not self._take(step):
                    continue
            self._execute(step, self._conn)

    def _raise_escaped(self) -> None:
        """(Under the lock, on the caller's thread.) Raise an interrupt a worker's step raised."""
        if self._escaped is not None:
            raise self._escaped


__all__ = ["NeedFailed", "Outcome", "Scheduler", "Step"]
