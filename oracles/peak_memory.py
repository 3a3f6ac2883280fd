"""A capsem-ledger command run in a child process that measures itself.

``measured(args)`` starts ``python -m oracles.peak_memory ARGS...``: the child imports the
command line, notes its resident size, runs ``capsem_core.cli.main(ARGS)`` with a thread
sampling ``/proc/self/status`` every few milliseconds, and writes what it saw as JSON to the
file its parent names (``CAPSEM_MEASURE_OUT``): the command's wall and CPU seconds (every
thread's, start-up excluded), its exit status, ``VmHWM`` (the kernel's own peak of the
resident size, what an OOM killer weighs), the anonymous and file-backed parts of the
resident size at the highest sample (``RssAnon``, ``RssFile``), the highest of each part
alone, and the resident size before the command ran. Samples can miss a peak shorter than
their interval; ``VmHWM`` cannot. Linux only (``/proc``): elsewhere ``measured`` raises
``Unsupported``. Benchmarks (bench/bench_scale.py) and tests (tests/test_resident_memory.py)
both use it; it never imports what it measures until the child runs it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STATUS = Path("/proc/self/status")
_FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
SAMPLE_S = 0.004


class Unsupported(RuntimeError):
    """The system gives no /proc/self/status to read a resident size from."""


@dataclass(frozen=True)
class Measured:
    """What one measured run saw (bytes and seconds)."""

    status: int
    wall_s: float
    cpu_s: float
    peak_rss: int         # VmHWM at the end: the highest resident size of the whole process
    anon_at_peak: int     # RssAnon and RssFile at the highest sampled resident size
    file_at_peak: int
    max_anon: int         # the highest of each sampled part alone
    max_file: int
    rss_before: int       # the resident size after start-up, before the command ran
    anon_before: int      # its anonymous and file parts
    file_before: int
    hwm_before: int       # VmHWM then (start-up's own peak)
    stdout: str
    stderr: str

    @property
    def grown(self) -> int:
        """How far the command raised the peak resident size above the one start-up left."""
        return max(0, self.peak_rss - self.hwm_before)


def _status() -> dict[str, int]:
    out = {}
    with open(STATUS, encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in _FIELDS:
                out[key] = int(value.split()[0]) * 1024
    return out


def measured(args: Sequence[str], *, env: dict[str, str] | None = None, preload: Sequence[str] = (),
             timeout: float = 600.0) -> Measured:
    """Run ``capsem-ledger ARGS`` in a child that measures itself (see the module).
    ``preload``: modules the child imports before it notes its resident size, so their code
    and data count as start-up, not as the command's."""
    if not STATUS.exists():
        raise Unsupported("no /proc/self/status here: the resident size cannot be read")
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "measured.json"
        full = dict(os.environ, **(env or {}), CAPSEM_MEASURE_OUT=str(out), CAPSEM_MEASURE_PRELOAD=",".join(preload))
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), full.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-m", "oracles.peak_memory", *args], env=full, capture_output=True,
                              text=True, timeout=timeout, cwd=root)
        if not out.exists():
            raise RuntimeError(f"the measured child wrote nothing (exit {done.returncode}): {done.stderr[-2000:]}")
        got = json.loads(out.read_text())
    return Measured(stdout=done.stdout, stderr=done.stderr, **got)


def _child(args: list[str]) -> None:
    import importlib

    from capsem_core.cli import main   # start-up: before the baseline

    for name in filter(None, os.environ.get("CAPSEM_MEASURE_PRELOAD", "").split(",")):
        importlib.import_module(name)

    before = _status()
    peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    most = {"RssAnon": 0, "RssFile": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            now = _status()
            if now["VmRSS"] > peak["VmRSS"]:
                peak.update(now)
            for key in most:
                most[key] = max(most[key], now[key])
            stop.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, name="peak-memory-sampler", daemon=True)
    sampler.start()
    wall, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    try:
        status = main(args)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    wall = time.perf_counter() - wall
    end = resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    sampler.join()
    after = _status()
    cpu = (end.ru_utime - usage.ru_utime) + (end.ru_stime - usage.ru_stime)
    result = {"status": int(status or 0), "wall_s": wall, "cpu_s": cpu, "peak_rss": after["VmHWM"],
              "anon_at_peak": peak["RssAnon"], "file_at_peak": peak["RssFile"], "max_anon": most["RssAnon"],
              "max_file": most["RssFile"], "rss_before": before["VmRSS"], "anon_before": before["RssAnon"],
              "file_before": before["RssFile"], "hwm_before": before["VmHWM"]}
    Path(os.environ["CAPSEM_MEASURE_OUT"]).write_text(json.dumps(result))


if __name__ == "__main__":
    _child(sys.argv[1:])
