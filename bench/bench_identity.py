"""What the identity graph section costs ``check`` (without --verify-bodies), on the
million-body small-body sample, in one run on the same warm ledger.

Group ``check-identity``: the whole report with its identity graph section against the same
report with the section left out (the baseline, for that benchmark only: ``check_identity_graph``
a no-op, no part queued, and the page scan reduced to what the tool lifecycle counts from it,
tool_calls' and tool_responses' call, trace and model call columns and model_calls' ids), and
the section alone on a connection in one read transaction, as
check runs it (group ``identity-alone``: the section's SQL, the baseline, against its four
session.db parts decided from the mapped file's pages, as check decides them where that file
is the snapshot). Target: the section adds at most 10% (ratio >= 0.91 in the summary line).
``test_check_identity_paired_rounds`` makes the same comparison with the two checks
alternating round by round, and prints the paired wall-time ratio and the CPU-time ratio: on
a host whose speed drifts from minute to minute, steadier than two benchmarks run one after
the other. In the same rounds it times a third check, the one without the section at all
(no page scan: the tool lifecycle counted by its SQL, as check counted it before the section
came), and prints that ratio too: what the section changed for a user, beside what it costs
against the stricter baseline the target is measured on. ``test_check_identity_cost_by_step``
measures the section's own steps by thread CPU (inside check, alternating with the baseline),
steadier still, and prints the same ratio from them.

Run: ``python3 -m pytest bench/bench_identity.py -q -s`` (``CAPSEM_BENCH_BODIES`` overrides
the ledger size).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest

from capsem_core import db as _db
from capsem_core import snapshot as opening
from capsem_core._native import _pages
from capsem_core.check import check_ledger, identity, run
from capsem_core.check.report import CheckResult
from capsem_core.pages import graph as identity_pages
from capsem_core.pages import index as index_pages
from capsem_core.pages import lifecycle as lifecycle_pages

sys.path.insert(0, str(Path(__file__).parent))
from conftest import timed  # noqa: E402

ROUNDS = 9   # the two checks differ by about a tenth: more rounds, steadier min and median
PAIRS = 8    # alternating pairs of the paired comparison


def _check(db: Path) -> None:
    report = check_ledger(db)
    assert report.sound and report.checks["tool_lifecycle"].counts["calls_without_responses"] == 0


def _no_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each of the section's part steps gives an empty part, and the section compares nothing.
    monkeypatch.setattr(run._Check, "_part", lambda self, i: lambda conn, *needs: CheckResult("identity_graph", ""))
    monkeypatch.setattr(run, "check_route", lambda *args: None)


def _leave_the_section_out(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_parts(monkeypatch)
    # The tool lifecycle's counts come from the same scan when the section runs: the baseline
    # keeps the scan of what they read, so the section is charged only for what it adds.
    monkeypatch.setattr(identity_pages, "wanted", lambda: dict(lifecycle_pages.USES))


@pytest.mark.benchmark(group="check-identity")
def test_check_without_the_identity_section(benchmark, small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _leave_the_section_out(monkeypatch)
    benchmark.extra_info["baseline"] = True
    benchmark.pedantic(_check, args=(small,), rounds=ROUNDS, iterations=1, warmup_rounds=1)


@pytest.mark.benchmark(group="check-identity")
def test_check_with_the_identity_section(benchmark, small: Path) -> None:
    benchmark.pedantic(_check, args=(small,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    graph = check_ledger(small).checks["identity_graph"]
    assert graph.status == "ok" and graph.counts["model_items"] > 0


def _section_alone(db: Path) -> CheckResult:
    conn = opening.open_read_only(db, _db.read_plan(db))
    try:
        conn.execute("BEGIN")
        result = CheckResult("identity_graph", "Identity graph")
        identity.check_identity_graph(conn, result, None)
        conn.execute("ROLLBACK")
        return result
    finally:
        conn.close()


@pytest.mark.benchmark(group="identity-alone")
def test_identity_section_alone(benchmark, small: Path) -> None:
    benchmark.extra_info["baseline"] = True
    result = benchmark.pedantic(_section_alone, args=(small,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert result.status == "ok"


def _parts_from_pages(db: Path) -> list[CheckResult | None]:
    conn = opening.open_read_only(db, _db.read_plan(db))
    mapped = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        graph = identity_pages.read_graph(mapped, conn)
        return [identity.held_part(graph, i) if graph is not None else None for i in range(4)]
    finally:
        mapped.close()
        conn.close()


@pytest.mark.benchmark(group="identity-alone")
def test_identity_parts_from_the_pages_alone(benchmark, small: Path) -> None:
    held = benchmark.pedantic(_parts_from_pages, args=(small,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert all(part is not None for part in held)   # a sound ledger: no part needs its SQL


def _leave_the_section_and_its_scan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Check as it ran before the section: no part, no page scan (check_ledger then counts the
    # tool lifecycle by its SQL).
    _no_parts(monkeypatch)
    monkeypatch.setattr(run, "worth_scanning", lambda pages: False)


def test_check_identity_paired_rounds(figure, small: Path) -> None:
    """The same comparison with the checks alternating round by round (a host whose speed
    drifts over a minute moves them alike): each round's ratio of wall times, and the ratio of
    the process's CPU time (every thread's), medians printed. Asserts nothing about speed."""
    times: dict[str, list[tuple[float, float]]] = {"without": [], "before": [], "with": []}
    timed(_check, small)
    for _ in range(PAIRS):
        with pytest.MonkeyPatch.context() as mp:
            _leave_the_section_out(mp)
            times["without"].append(timed(_check, small))
        with pytest.MonkeyPatch.context() as mp:
            _leave_the_section_and_its_scan_out(mp)
            times["before"].append(timed(_check, small))
        times["with"].append(timed(_check, small))

    def line(name: str, what: str, target: str) -> str:
        ratios = [a[0] / b[0] for a, b in zip(times[name], times["with"])]
        cpu = [statistics.median(t[1] for t in times[k]) for k in (name, "with")]
        return (f"\ncheck {what} / with the identity section, {PAIRS} alternating rounds: wall ratio median "
                f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); CPU "
                f"{cpu[0]:.2f} s / {cpu[1]:.2f} s = {cpu[0] / cpu[1]:.3f}{target}")
    figure(line("without", "without the section (the lifecycle's columns scanned)", " (target >= 0.91)")
          + line("before", "before the section (no scan, the lifecycle by SQL)", ""))


def _thread_cpu(monkeypatch: pytest.MonkeyPatch, spent: dict[str, float]) -> None:
    """Add each call's thread CPU time of the section's own steps to ``spent``, by step."""
    for module, name in ((run, "read_graph"), (identity, "held_part")):
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):   # type: ignore[no-untyped-def]
            start = time.thread_time()
            try:
                return _real(*args, **kwargs)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.thread_time() - start
        monkeypatch.setattr(module, name, counted)


def _alongside_cost(db: Path) -> float:
    """The thread CPU the body index's pass spends on event_body_blobs' traces and turns for
    the section: the pass with and without them, alternating, median difference."""
    conn = opening.open_read_only(db, _db.read_plan(db))
    mapped = _pages.PageFile(db)
    try:
        conn.execute("BEGIN")
        spent: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(PAIRS):
            for alongside in (False, True):
                start = time.thread_time()
                index_pages.read_index(mapped, conn, alongside=identity_pages.blobs_alongside(identity_pages.Graph())
                                       if alongside else None)
                spent[alongside].append(time.thread_time() - start)
        return statistics.median(spent[True]) - statistics.median(spent[False])
    finally:
        mapped.close()
        conn.close()


def test_check_identity_cost_by_step(figure, small: Path) -> None:
    """Where the section's CPU goes, steadier than the difference of two whole checks' times:
    the thread CPU, inside check, of the two steps it adds to (the page scan, read_graph; the
    joins, held_part), the section's rounds less the baseline's, alternating round by round;
    and the body index's pass reading event_body_blobs' traces and turns for it, with and
    without them on one connection. The ratio printed is the baseline check's CPU over that
    plus the three shares. It leaves out what the section costs the other threads (memory
    and caches they share), which the paired rounds above include. Asserts nothing about
    speed."""
    rounds: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    timed(_check, small)
    for _ in range(PAIRS):
        for name in ("without", "with"):
            spent: dict[str, float] = {}
            with pytest.MonkeyPatch.context() as mp:
                _thread_cpu(mp, spent)
                if name == "without":
                    _leave_the_section_out(mp)
                spent["check"] = timed(_check, small)[1]
            rounds[name].append(spent)

    def median(name: str, step: str) -> float:
        return statistics.median(r.get(step, 0.0) for r in rounds[name])
    share = {step: median("with", step) - median("without", step) for step in ("read_graph", "held_part")}
    share["alongside"] = _alongside_cost(small)
    base = median("without", "check")
    total = base + sum(share.values())
    figure(f"\nthe section's steps, thread CPU, {PAIRS} alternating rounds: page scan "
          f"{share['read_graph'] * 1000:.0f} ms, joins {share['held_part'] * 1000:.0f} ms (both inside check), event_body_blobs' traces and turns "
          f"{share['alongside'] * 1000:.0f} ms; check without the section {base:.2f} s of CPU; "
          f"{base:.2f} / {total:.2f} = {base / total:.3f} (target >= 0.91)")
