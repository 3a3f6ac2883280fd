"""The check's scheduler (check/steps.py) on its own: a step runs only once what it needs is
done and gets those results; the caller's steps run on its thread with its connection in the
declared order as far as their needs allow; pool steps run on the workers, costliest first,
or on the caller when it waits on one no worker has taken; a failure stops everything but
the verdict steps; an interrupt, raised on the caller's thread or in a step on a worker, stops
and joins everything. Every wait here is on an event
the steps themselves set: nothing depends on how fast a thread runs."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from capsem_core.check.steps import NeedFailed, Scheduler, Step

BOUND = 60.0   # only a lost step ever waits this long: it turns a hang into a failure


class Conn:
    """A stand-in connection: the scheduler only hands it to the steps."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def scheduler(steps: list[Step], workers: int = 0, interrupt: Any = None) -> Scheduler:
    return Scheduler(steps, Conn("main"), [Conn(f"w{i}") for i in range(workers)],  # type: ignore[arg-type]
                     interrupt or (lambda: None))


def test_a_step_gets_the_results_of_what_it_needs_in_the_order_it_names_them() -> None:
    steps = [Step("a", lambda c: 2), Step("b", lambda c: 3),
             Step("sum", lambda c, b, a: (b, a), needs=("b", "a"))]
    outcome = scheduler(steps).run()
    assert outcome.results == {"a": 2, "b": 3, "sum": (3, 2)} and outcome.failures == {}


def test_the_callers_steps_run_on_its_thread_and_connection_in_declared_order_as_needs_allow() -> None:
    ran: list[tuple[str, str, str]] = []
    gate = threading.Event()

    def record(name: str, then: Any = None) -> Any:
        def run(conn: Conn, *_: object) -> None:
            ran.append((name, conn.name, threading.current_thread().name))
            if then is not None:
                then()
        return run

    # "late" waits on a pool step that waits on "last": the steps after "late" go first.
    steps = [Step("late", record("late"), needs=("pooled",)), Step("next", record("next")),
             Step("last", record("last", gate.set)), Step("pooled", lambda c: gate.wait(BOUND), pool=True)]
    scheduler(steps, workers=1).run()
    me = threading.current_thread().name
    assert ran == [("next", "main", me), ("last", "main", me), ("late", "main", me)]


def test_pool_steps_run_on_the_workers_connections_costliest_first() -> None:
    order: list[str] = []
    started, release, all_done = threading.Event(), threading.Event(), threading.Event()

    def blocker(conn: Conn) -> str:
        started.set()
        assert release.wait(BOUND)
        return conn.name

    def later(name: str, then: Any = None) -> Any:
        def run(conn: Conn) -> str:
            order.append(name)
            if then is not None:
                then()
            return conn.name
        return run

    # The caller holds in its own step until the last pool step has run, so the one worker
    # takes them all, one after another, from the queue.
    steps = [Step("blocker", blocker, pool=True, cost=100),
             Step("small", later("small", all_done.set), pool=True, cost=1),
             Step("big", later("big"), pool=True, cost=50), Step("mid", later("mid"), pool=True, cost=10),
             Step("own", lambda conn: (started.wait(BOUND), release.set(), all_done.wait(BOUND)))]
    outcome = scheduler(steps, workers=1).run()
    assert order == ["big", "mid", "small"]
    assert {outcome.results[n] for n in ("blocker", "big", "mid", "small")} == {"w0"}


def test_the_caller_runs_a_pool_step_it_waits_on_that_no_worker_has_taken() -> None:
    held = threading.Event()
    release = threading.Event()

    def hold(conn: Conn) -> None:
        held.set()
        assert release.wait(BOUND)

    steps = [Step("busy", hold, pool=True, cost=9),
             Step("wanted", lambda conn: (conn.name, threading.current_thread().name), pool=True, cost=1),
             Step("own", lambda conn, got: (release.set(), got)[1], needs=("wanted",)),
             Step("first", lambda conn: held.wait(BOUND))]
    outcome = scheduler(steps, workers=1).run()
    assert outcome.results["wanted"] == ("main", threading.current_thread().name)


def test_a_failure_stops_the_other_steps_but_the_verdict_ones_run_to_their_end() -> None:
    ran: list[str] = []

    def boom(conn: Conn) -> None:
        raise RuntimeError("no")

    steps = [Step("page", lambda c: ran.append("page") or "ok", pool=True, verdict=True),
             Step("boom", boom),
             Step("after", lambda c: ran.append("after")),
             Step("needs_boom", lambda c, b: ran.append("needs"), needs=("boom",))]
    outcome = scheduler(steps, workers=1).run()
    assert ran == ["page"] and outcome.results["page"] == "ok"
    assert isinstance(outcome.failures["boom"], RuntimeError)
    assert isinstance(outcome.failures["after"], NeedFailed) and isinstance(outcome.failures["needs_boom"], NeedFailed)
    assert outcome.first_failure(steps, verdict=False) is outcome.failures["boom"]
    assert outcome.first_failure(steps, verdict=True) is None


def test_the_first_failure_is_the_first_in_declared_order_not_in_time() -> None:
    first_done = threading.Event()

    def late(conn: Conn) -> None:
        assert first_done.wait(BOUND)
        raise ValueError("declared first, failed second")

    def early(conn: Conn) -> None:
        first_done.set()
        raise KeyError("failed first")

    steps = [Step("one", late, pool=True, verdict=True), Step("two", early, pool=True, verdict=True)]
    outcome = scheduler(steps, workers=2).run()
    assert isinstance(outcome.first_failure(steps, verdict=True), ValueError)


def test_an_interrupt_stops_what_runs_joins_the_workers_and_is_raised() -> None:
    running = threading.Event()
    stopped = threading.Event()

    def long(conn: Conn) -> None:
        running.set()
        assert stopped.wait(BOUND)   # ends once interrupt() is called, as a cancelled walk does

    def ctrl_c(conn: Conn) -> None:
        assert running.wait(BOUND)
        raise KeyboardInterrupt

    steps = [Step("long", long, pool=True, verdict=True), Step("later", lambda c: None, pool=True, verdict=True),
             Step("own", ctrl_c)]
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        scheduler(steps, workers=1, interrupt=stopped.set).run()
    assert stopped.is_set() and threading.active_count() == before


def test_an_interrupt_raised_in_a_step_on_a_worker_is_raised_by_the_run_not_lost() -> None:
    waiting = threading.Event()
    stopped = threading.Event()

    def own(conn: Conn) -> None:
        waiting.set()

    def ctrl_c(conn: Conn) -> None:
        assert waiting.wait(BOUND)
        raise KeyboardInterrupt

    def long(conn: Conn) -> None:
        assert stopped.wait(BOUND)   # ends once interrupt() is called

    # The caller's own step waits on a pool step that never settles unless the run is torn
    # down: the worker's interrupt must reach the caller rather than leave it waiting.
    steps = [Step("own", own), Step("ctrl_c", ctrl_c, pool=True, cost=2.0),
             Step("long", long, pool=True, cost=1.0), Step("after", lambda c, _l: None, needs=("long",))]
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        scheduler(steps, workers=2, interrupt=stopped.set).run()
    assert stopped.is_set() and threading.active_count() == before


def test_steps_that_need_an_undeclared_step_or_repeat_a_name_are_refused() -> None:
    with pytest.raises(ValueError, match="not declared"):
        scheduler([Step("a", lambda c, x: None, needs=("x",))])
    with pytest.raises(ValueError, match="repeat"):
        scheduler([Step("a", lambda c: None), Step("a", lambda c: None)])


def test_a_transient_result_is_released_when_its_readers_settle_even_unrun() -> None:
    released: list[str] = []

    def boom(conn: Conn, index: object) -> None:
        raise RuntimeError("no")

    steps = [Step("index", lambda c: "big arrays", transient=True, release=lambda: released.append("index")),
             Step("boom", boom, needs=("index",)),
             Step("reads_index", lambda c, i: i, needs=("index",)),   # stopped by boom, never run
             Step("after", lambda c: None)]
    outcome = scheduler(steps).run()
    assert isinstance(outcome.failures["reads_index"], NeedFailed)
    assert released == ["index"] and outcome.results.get("index") is None
