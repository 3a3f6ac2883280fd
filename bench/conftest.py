"""Shared bench helpers: after the pytest-benchmark table, print each group's same-run ratios
to its baseline (the benchmark that sets ``benchmark.extra_info["baseline"] = True``)."""

from __future__ import annotations

from collections import defaultdict

import pytest


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    session = getattr(terminalreporter.config, "_benchmarksession", None)
    benchmarks = getattr(session, "benchmarks", None) or []
    groups: dict[str, list] = defaultdict(list)
    for bench in benchmarks:
        groups[bench.group or ""].append(bench)
    lines = []
    for group, members in groups.items():
        baseline = next((b for b in members if b.extra_info.get("baseline")), None)
        if baseline is None:
            continue
        for bench in members:
            if bench is baseline:
                continue
            # Speed relative to the baseline (> 1: faster), on the best and the median round.
            best = baseline.stats.min / bench.stats.min
            median = baseline.stats.median / bench.stats.median
            lines.append(f"{group:<34} {bench.name:<44} {best:7.2f}x {median:7.2f}x   vs {baseline.name}")
    if lines:
        terminalreporter.write_sep("-", "speed vs baseline, same run (min round, median round)")
        for line in lines:
            terminalreporter.write_line(line)
