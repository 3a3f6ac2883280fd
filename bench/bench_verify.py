"""verify-bodies: the native kernel side by side with the pure-Python baseline, in one run.

Groups (the ratio table after the run divides each mean into its group's baseline):

* ``verify-large``: a large-body sample (>= 1 GiB raw; ``CAPSEM_BENCH_RAW`` overrides) —
  baseline (oracles/baseline_verify.py) vs the kernel on 1 thread, 1 thread without libdeflate,
  and 2 threads. Target: 1 thread >= 2.5x the baseline.
  The group also holds the floor (oracles/verify_floor.py): only the inflate and the hashes that
  no verifier can skip, with libdeflate and our BLAKE3 or the ``blake3`` package. The
  baseline's time over the floor's is the most any single-threaded kernel on these
  primitives can show on this machine.
* ``verify-large-threads``: 2 threads vs 1 thread on the same sample. Target: >= 1.7x.
* ``verify-small``: a small-body sample (1,000,000 bodies of ~100-300 bytes;
  ``CAPSEM_BENCH_BODIES`` overrides), index scan included on both sides. Target: >= 5x.
* ``test_peak_rss_is_flat_in_archive_size``: peak RSS of a verify in a fresh subprocess on
  the large sample and on one a quarter its size. Target: < 15% more for the 4x archive.

Run: ``python3 -m pytest bench/bench_verify.py -q -s`` (ledgers are cached, see conftest).
The load average is printed beside each benchmark: the machine is shared, and the 2-thread
figures mean something only when it is otherwise idle.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import verify as _verify
from capsem_core._native import _archive

sys.path.insert(0, str(Path(__file__).parent))
from oracles.baseline_verify import verify_ledger as baseline_verify  # noqa: E402
from conftest import RAW, sample_ledger, warm  # noqa: E402
from oracles import verify_floor  # noqa: E402


def _kernel(db: Path, threads: int, use_libdeflate: bool = True) -> tuple[int, list]:
    return _verify.verify_ledger(db, threads=threads, use_libdeflate=use_libdeflate)


def _run(benchmark, fn, *args, rounds: int = 3, baseline: bool = False):
    if baseline:
        benchmark.extra_info["baseline"] = True
    verified, findings = benchmark.pedantic(fn, args=args, rounds=rounds, iterations=1, warmup_rounds=0)
    assert findings == [] and verified > 0
    benchmark.extra_info["bodies"] = verified


@pytest.mark.benchmark(group="verify-large")
def test_large_baseline(benchmark, large):
    _run(benchmark, baseline_verify, large, rounds=1, baseline=True)


@pytest.mark.benchmark(group="verify-large")
def test_large_kernel_1_thread(benchmark, large):
    _run(benchmark, _kernel, large, 1)


@pytest.mark.benchmark(group="verify-large")
def test_large_kernel_1_thread_zlib_only(benchmark, large):
    _run(benchmark, _kernel, large, 1, False)


@pytest.mark.benchmark(group="verify-large")
def test_large_kernel_2_threads(benchmark, large):
    _run(benchmark, _kernel, large, 2)


@pytest.mark.benchmark(group="verify-large")
@pytest.mark.parametrize("hasher", ["ours", "package"])
def test_large_floor(figure, benchmark, large, hasher):
    work = verify_floor.plan(large)
    passes = []
    benchmark.pedantic(lambda: passes.append(verify_floor.run(work, hasher)), rounds=3, iterations=1,
                       warmup_rounds=0)
    inflated, hashed, inflate_s, hash_s = min(passes, key=lambda p: p[2] + p[3])
    benchmark.extra_info.update(inflated=inflated, hashed=hashed, inflate_s=inflate_s, hash_s=hash_s)
    figure(f"\nfloor with {hasher} BLAKE3: {inflated / 1e9:.2f} GB inflated in {inflate_s:.3f} s "
          f"({inflated / inflate_s / 1e9:.2f} GB/s), {hashed / 1e9:.2f} GB hashed in {hash_s:.3f} s "
          f"({hashed / hash_s / 1e9:.2f} GB/s)")


@pytest.mark.benchmark(group="verify-large-threads")
def test_threads_1(benchmark, large):
    _run(benchmark, _kernel, large, 1, baseline=True)


@pytest.mark.benchmark(group="verify-large-threads")
def test_threads_2(benchmark, large):
    _run(benchmark, _kernel, large, 2)


@pytest.mark.benchmark(group="verify-small")
def test_small_baseline(benchmark, small):
    _run(benchmark, baseline_verify, small, rounds=1, baseline=True)


@pytest.mark.benchmark(group="verify-small")
def test_small_kernel_1_thread(benchmark, small):
    _run(benchmark, _kernel, small, 1)


@pytest.mark.benchmark(group="verify-small")
def test_small_kernel_2_threads(benchmark, small):
    _run(benchmark, _kernel, small, 2)


# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's resident size at fork
# (this pytest process, hundreds of MiB after the small-sample baseline), while VmHWM is the
# high-water mark of the child's own address space since exec.
_PEAK = """
import sys
from capsem_core import verify as _verify
from capsem_core._native import _archive
verified, findings = _verify.verify_ledger(sys.argv[1], threads=int(sys.argv[2]))
assert not findings
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _peak_rss_kib(db: Path, threads: int) -> int:
    out = subprocess.run([sys.executable, "-c", _PEAK, str(db), str(threads)], check=True,
                         capture_output=True, text=True)
    return int(out.stdout.split()[-1])


@pytest.mark.parametrize("threads", [1, 2])
def test_peak_rss_is_flat_in_archive_size(figure, large, threads):
    quarter = warm(sample_ledger("large", raw_bytes=RAW // 4))
    small_rss = _peak_rss_kib(quarter, threads)
    large_rss = _peak_rss_kib(large, threads)
    growth = large_rss / small_rss - 1
    figure(f"\npeak RSS, {threads} thread(s): {small_rss / 1024:.1f} MiB at {RAW // 4 >> 20} MiB raw, "
          f"{large_rss / 1024:.1f} MiB at {RAW >> 20} MiB raw: {growth:+.1%}")
    assert growth < 0.15
