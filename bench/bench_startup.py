"""Start-up: what a command costs before and besides its work, against a bare interpreter.

Each round starts a fresh process, with the modules' bytecode cached as on any install; the
baseline is ``python -c pass`` (the interpreter's own start-up), measured in the same run,
alternating with the contenders. Targets (median of 9
rounds, the contender's time over the baseline's): ``capsem-ledger --version`` at most 4x,
``list`` (of a small home) at most 6x, ``check`` of a small sample ledger at most 10x. The
ratios are printed as "x python -c pass" beside pytest-benchmark's speed table (where they
read as the baseline's speed over the contender's: 0.25x is 4x the time).

Run: ``python -m pytest bench/bench_startup.py -q -s``
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROUNDS = 9
ENTRY = [sys.executable, "-m", "capsem_core"]
TARGETS = {"version": 4.0, "list": 6.0, "check": 10.0}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small CAPSEM_HOME (three sessions) whose latest ledger ``check`` reads."""
    root = tmp_path_factory.mktemp("startup") / "home"
    subprocess.run([*ENTRY, "sample", "--home", str(root), "--sessions", "3"], check=True, capture_output=True)
    return root


def _env(home: Path) -> dict[str, str]:
    # As on any installed package, the modules' bytecode is cached (pip compiles a wheel's at
    # install; the warm-up run writes an editable install's): an environment that turns the
    # cache off (PYTHONDONTWRITEBYTECODE) would time compiling the package at every start.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, CAPSEM_HOME=str(home), CAPSEM_RUN_DIR=str(home / "run"))


def _commands(home: Path) -> dict[str, list[str]]:
    ledger = next((home / "run" / "sessions").iterdir()) / "session.db"
    # The console script's own shim adds nothing here: ``-m capsem_core`` is the same entry.
    return {"pass": [sys.executable, "-c", "pass"], "version": [*ENTRY, "--version"], "list": [*ENTRY, "list"],
            "check": [*ENTRY, "check", "--db", str(ledger)]}


def _run_once(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    spent = time.perf_counter() - began
    assert done.returncode == 0, done.stderr[-500:]
    return spent


@pytest.mark.parametrize("name", ["pass", "version", "list", "check"])
def test_startup(benchmark, home: Path, name: str) -> None:
    benchmark.group = "startup"
    if name == "pass":
        benchmark.extra_info["baseline"] = True
    argv, env = _commands(home)[name], _env(home)
    _run_once(argv, env)   # the interpreter and the package from the page cache
    benchmark.pedantic(_run_once, args=(argv, env), rounds=ROUNDS, iterations=1)


def test_startup_paired_rounds(figure, home: Path) -> None:
    """The three ratios from alternating rounds (a machine whose speed drifts moves the pair
    alike), medians of 9, printed beside their targets. Asserts nothing about speed."""
    commands, env = _commands(home), _env(home)
    for argv in commands.values():
        _run_once(argv, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(ROUNDS):
        for name, argv in commands.items():
            times[name].append(_run_once(argv, env))
    base = statistics.median(times["pass"])
    lines = [f"\npython -c pass: median {base * 1000:.1f} ms over {ROUNDS} rounds"]
    for name, target in TARGETS.items():
        median = statistics.median(times[name])
        lines.append(f"{name:<8} median {median * 1000:7.1f} ms = {median / base:5.2f}x python -c pass "
                     f"(target <= {target:g}x)")
    figure("\n".join(lines))
