"""BLAKE3 in C against the blake3 package (Rust, with its own AVX2 / AVX-512 assembly), side
by side in one run.

One input of 64 B, 1 KiB, 64 KiB, 1 MiB and 256 MiB (from memory) through ``_blake3.digest``
at the best SIMD level and at the portable level (not at 256 MiB), against
``blake3.blake3(x).digest()``; and 100,000 bodies of
100-300 bytes through ``_blake3.hash_many`` against a Python loop over the package, which is
what hashing bodies costs without a many-input entry point; the same for 10,000 bodies of
1-16 KiB (a few chunks each, which hash_many also runs across the lanes).

Run: ``python3 -m pytest bench/bench_blake3.py -q`` (bench/conftest.py prints each group's
speed relative to the package after the table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import blake3
import numpy as np
import pytest

from capsem_core._native import _blake3

BEST = _blake3.best_level()
# 256 MiB is larger than any last-level cache here: it streams from memory, as the on-disk
# bytes of an archive in the page cache do (the --incremental proof of unchanged blocks).
SIZES = {"64 B": 64, "1 KiB": 1024, "64 KiB": 64 * 1024, "1 MiB": 1024 * 1024, "256 MiB": 256 * 1024 * 1024}
# (count, shortest, longest): the common small body, and bodies of a few chunks.
BODY_SETS = {"100-300 B": (100_000, 100, 300), "1-16 KiB": (10_000, 1025, 16 * 1024)}


@pytest.fixture
def at_level() -> Iterator[Callable[[str], None]]:
    before = _blake3.simd_level()
    yield _blake3.set_simd_level
    _blake3.set_simd_level(before)


@pytest.fixture(scope="module", params=list(BODY_SETS))
def bodies(request: pytest.FixtureRequest) -> tuple[str, bytes, np.ndarray, np.ndarray, list[bytes]]:
    count, shortest, longest = BODY_SETS[request.param]
    rng = np.random.default_rng(20240611)
    lengths = rng.integers(shortest, longest + 1, count).astype(np.uint64)
    offsets = np.zeros_like(lengths)
    offsets[1:] = np.cumsum(lengths)[:-1]
    buf = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8).tobytes()
    pieces = [buf[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
    return f"{count} bodies of {request.param}", buf, offsets, lengths, pieces


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("who", ["package", f"ours {BEST}", "ours portable"])
def test_one_input(benchmark, at_level, size: str, who: str) -> None:
    if who == "ours portable" and SIZES[size] > 1 << 20:
        pytest.skip("the portable level is shown on inputs that fit a cache")
    data = np.random.default_rng(SIZES[size]).integers(0, 256, SIZES[size], dtype=np.uint8).tobytes()
    benchmark.group = f"blake3 one input {size}"
    if who == "package":
        benchmark.extra_info["baseline"] = True
        result = benchmark(lambda: blake3.blake3(data).digest())
    else:
        at_level(who.split()[1])
        result = benchmark(_blake3.digest, data)
    assert result == blake3.blake3(data).digest()


@pytest.mark.parametrize("who", ["package loop", f"ours hash_many {BEST}", "ours hash_many portable"])
def test_many_bodies(benchmark, at_level, bodies, who: str) -> None:
    name, buf, offsets, lengths, pieces = bodies
    benchmark.group = f"blake3 {name}"
    if who == "package loop":
        benchmark.extra_info["baseline"] = True
        rows = benchmark(lambda: [blake3.blake3(p).digest() for p in pieces])
        rows = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, 32)
    else:
        at_level(who.split()[2])
        rows = benchmark(_blake3.hash_many, buf, offsets, lengths)
    assert bytes(rows[-1]) == blake3.blake3(pieces[-1]).digest()
