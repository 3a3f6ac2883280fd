"""BLAKE3 in C (capsem_core._native._blake3): official vectors at every SIMD level, agreement with the
blake3 package (oracle only) on every length up to 70,000 bytes at every level, SIMD against
portable on mixed slices, and the bounds hash_many enforces before it hashes. The avx512
level's code runs here as "avx512-on-avx2" wherever the CPU has AVX2; the neon level runs on
arm64 (scripts/test-arm64 runs this file in an arm64 root under qemu)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blake3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsem_core._native import _blake3

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "blake3_test_vectors.json"  # the official BLAKE3 vectors
LEVELS = _blake3.available_levels()
# Every level the module knows, by number.
ALL_LEVELS = ["portable", "sse41", "avx2", "avx512", "avx512-on-avx2", "neon"]
X86_64 = platform.machine().lower() in ("x86_64", "amd64")
ARM64 = platform.machine().lower() in ("aarch64", "arm64")


def vector_input(length: int) -> bytes:
    return bytes(i % 251 for i in range(length))


@pytest.fixture(scope="module")
def vectors() -> dict:
    return json.loads(VECTORS.read_text())


@pytest.fixture(params=LEVELS)
def level(request: pytest.FixtureRequest) -> Iterator[str]:
    before = _blake3.simd_level()
    _blake3.set_simd_level(request.param)
    try:
        yield request.param
    finally:
        _blake3.set_simd_level(before)


@pytest.fixture(scope="module")
def noise() -> bytes:
    return np.random.default_rng(20240611).integers(0, 256, 300_000, dtype=np.uint8).tobytes()


def oracle_rows(buf: bytes, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    rows = [blake3.blake3(buf[o : o + n]).digest() for o, n in zip(offsets.tolist(), lengths.tolist())]
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, 32)


def test_the_best_level_is_chosen_by_default_and_portable_is_always_there() -> None:
    assert LEVELS[0] == "portable"
    # Nothing in this module has changed the level yet: the default is the best the CPU has,
    # the last of the levels the dispatcher may choose.
    chosen = [name for name in LEVELS if name != "avx512-on-avx2"]
    assert _blake3.simd_level() == _blake3.best_level() == chosen[-1]


def test_every_level_the_cpu_runs_passes_the_self_check_the_automatic_choice_makes() -> None:
    assert all(_blake3.self_check(name) for name in LEVELS)
    assert not any(_blake3.self_check(name) for name in ALL_LEVELS if name not in LEVELS)
    with pytest.raises(ValueError, match="unknown BLAKE3 SIMD level"):
        _blake3.self_check("avx1024")


def test_the_avx512_code_runs_on_every_avx2_cpu_and_is_never_chosen_by_itself() -> None:
    if "avx2" not in LEVELS:
        pytest.skip("this CPU has no AVX2")
    assert "avx512-on-avx2" in LEVELS
    assert _blake3.best_level() in ("avx2", "avx512")
    assert ("avx512" in LEVELS) == (_blake3.best_level() == "avx512")


def test_neon_is_the_level_of_every_arm64_cpu_and_of_no_other() -> None:
    if ARM64:
        assert LEVELS == ["portable", "neon"]
        assert _blake3.best_level() == "neon"
    else:
        assert "neon" not in LEVELS
        with pytest.raises(ValueError, match="this CPU cannot run BLAKE3 SIMD level 'neon'"):
            _blake3.set_simd_level("neon")


def test_every_official_vector_matches_in_hash_mode_with_full_extended_output(vectors: dict, level: str) -> None:
    for case in vectors["cases"]:
        data = vector_input(case["input_len"])
        expected = bytes.fromhex(case["hash"])
        assert _blake3.extended(data, len(expected)) == expected, case["input_len"]
        assert _blake3.digest(data) == expected[:32], case["input_len"]
        assert _blake3.hexdigest(data) == case["hash"][:64]


def test_every_official_vector_matches_in_keyed_mode(vectors: dict, level: str) -> None:
    key = vectors["key"].encode()
    for case in vectors["cases"]:
        expected = bytes.fromhex(case["keyed_hash"])
        assert _blake3.extended(vector_input(case["input_len"]), len(expected), key=key) == expected, case["input_len"]


def test_hash_many_gives_the_official_vectors_in_one_call(vectors: dict, level: str) -> None:
    lengths = np.array([c["input_len"] for c in vectors["cases"]], dtype=np.uint64)
    data = vector_input(int(lengths.max()))
    rows = _blake3.hash_many(data, np.zeros_like(lengths), lengths)
    assert [bytes(r).hex() for r in rows] == [c["hash"][:64] for c in vectors["cases"]]


def test_feeding_the_hasher_in_pieces_changes_nothing(vectors: dict, level: str) -> None:
    key = vectors["key"].encode()
    for case in vectors["cases"][-8:]:
        data = vector_input(case["input_len"])
        expected = bytes.fromhex(case["keyed_hash"])
        for piece in (1, 63, 64, 1000, 1024, 1025, 3 * 1024 + 7):
            assert _blake3.extended(data, len(expected), key=key, piece=piece) == expected, (case["input_len"], piece)


TOP = 70_000


@pytest.fixture(scope="module")
def every_prefix_digest(noise: bytes) -> np.ndarray:
    """The blake3 package's digest of every prefix of noise up to TOP bytes, row by length."""
    oracle = blake3.blake3()
    expected = bytearray(oracle.digest())
    for i in range(TOP):
        oracle.update(noise[i : i + 1])
        expected += oracle.digest()
    return np.frombuffer(bytes(expected), dtype=np.uint8).reshape(-1, 32)


def test_every_length_up_to_70000_bytes_agrees_with_the_blake3_package(noise: bytes, every_prefix_digest: np.ndarray,
                                                                        level: str) -> None:
    # Every prefix in two hash_many calls on two threads (they run without the GIL).
    lengths = np.arange(TOP + 1, dtype=np.uint64)
    with ThreadPoolExecutor(2) as pool:
        halves = [pool.submit(_blake3.hash_many, noise, np.zeros_like(lengths[k::2]), lengths[k::2]) for k in (0, 1)]
        ours = np.empty((TOP + 1, 32), dtype=np.uint8)
        ours[0::2], ours[1::2] = halves[0].result(), halves[1].result()
    mismatch = np.flatnonzero((ours != every_prefix_digest).any(axis=1))
    assert mismatch.size == 0, f"first wrong lengths: {mismatch[:5].tolist()}"


def test_large_inputs_agree_with_the_blake3_package(noise: bytes, level: str) -> None:
    # Sizes around the subtree and stack boundaries of the one-shot path.
    big = noise * 4
    for length in (256 * 1024, 256 * 1024 + 1, 512 * 1024 - 1, 768 * 1024, 768 * 1024 + 1000, len(big)):
        assert _blake3.digest(big[:length]) == blake3.blake3(big[:length]).digest(), length


def random_slices(rng: np.random.Generator, size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Mixed lengths (mostly bodies of one chunk or less, some up to 70 KB) at any offset."""
    small = rng.integers(0, 1025, count)
    large = rng.integers(1025, 70_001, count)
    lengths = np.where(rng.random(count) < 0.85, small, large).astype(np.uint64)
    offsets = (rng.random(count) * (size - lengths + 1)).astype(np.uint64)
    return offsets, lengths


def test_every_simd_level_agrees_with_portable_on_random_unaligned_slices(noise: bytes, level: str) -> None:
    rng = np.random.default_rng(7)
    offsets, lengths = random_slices(rng, len(noise), 4000)
    ours = _blake3.hash_many(noise, offsets, lengths)
    _blake3.set_simd_level("portable")
    assert np.array_equal(ours, _blake3.hash_many(noise, offsets, lengths))
    assert (offsets % 32 != 0).any() and (lengths <= 1024).any() and (lengths > 1024).any()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 40),
    longest=st.sampled_from([64, 1024, 1025, 9000, 70_000]),
)
def test_every_simd_level_agrees_with_portable_on_any_set_of_slices(noise: bytes, seed: int, count: int, longest: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest + 1, count).astype(np.uint64)
    offsets = (rng.random(count) * (len(noise) - lengths + 1)).astype(np.uint64)
    before = _blake3.simd_level()
    try:
        rows = {level: _blake3.hash_many(noise, offsets, lengths) for level in LEVELS if _blake3.set_simd_level(level)}
    finally:
        _blake3.set_simd_level(before)
    for level in LEVELS[1:]:
        assert np.array_equal(rows[level], rows["portable"]), level


def test_bodies_of_mixed_small_lengths_agree_with_the_blake3_package(noise: bytes, level: str) -> None:
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 1025, 3000).astype(np.uint64)
    lengths[:40] = np.arange(40) * 26  # every block count, including empty bodies
    offsets = rng.integers(0, len(noise) - 1024, lengths.size).astype(np.uint64)
    assert np.array_equal(_blake3.hash_many(noise, offsets, lengths), oracle_rows(noise, offsets, lengths))


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33])
def test_any_number_of_inputs_fills_the_lanes_correctly(noise: bytes, level: str, count: int) -> None:
    rng = np.random.default_rng(count)
    offsets, lengths = random_slices(rng, len(noise), count)
    assert np.array_equal(_blake3.hash_many(noise, offsets, lengths), oracle_rows(noise, offsets, lengths))


def test_hash_many_accepts_any_buffer_and_no_slices() -> None:
    data = b"capsem ledger body"
    lengths = np.array([len(data), 0, 6], dtype=np.uint64)
    offsets = np.array([0, len(data), 7], dtype=np.uint64)
    expected = oracle_rows(data, offsets, lengths)
    for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8)):
        assert np.array_equal(_blake3.hash_many(buf, offsets, lengths), expected)
    assert np.array_equal(_blake3.hash_many(b"", [0], [0]), oracle_rows(b"", np.zeros(1, int), np.zeros(1, int)))
    empty = _blake3.hash_many(data, np.array([], dtype=np.uint64), np.array([], dtype=np.uint64))
    assert empty.shape == (0, 32) and empty.dtype == np.uint8


@pytest.mark.parametrize(
    ("offset", "length"),
    [(101, 0), (100, 1), (0, 101), (50, 51), (2**64 - 1, 2), (2**63, 2**63), (1, 2**64 - 1)],
)
def test_hash_many_refuses_a_slice_past_the_end_of_the_buffer(offset: int, length: int) -> None:
    buf = bytes(100)
    offsets = np.array([0, offset], dtype=np.uint64)
    lengths = np.array([10, length], dtype=np.uint64)
    with pytest.raises(ValueError, match="slice 1 .* runs past the end of the 100-byte buffer"):
        _blake3.hash_many(buf, offsets, lengths)


def test_hash_many_refuses_arrays_that_are_not_one_list_of_counts() -> None:
    buf = bytes(100)
    with pytest.raises(ValueError, match="differ in length"):
        _blake3.hash_many(buf, np.zeros(3, np.uint64), np.zeros(2, np.uint64))
    with pytest.raises(ValueError, match="must not be negative"):
        _blake3.hash_many(buf, np.array([-1], np.int64), np.array([1], np.int64))
    with pytest.raises(ValueError, match="integer array"):
        _blake3.hash_many(buf, np.array([0.5]), np.array([1]))
    with pytest.raises(ValueError, match="one-dimensional"):
        _blake3.hash_many(buf, np.zeros((2, 2), np.uint64), np.zeros((2, 2), np.uint64))


def test_set_simd_level_takes_names_and_numbers_and_refuses_unknown_levels() -> None:
    before = _blake3.simd_level()
    try:
        for name in LEVELS:
            assert _blake3.set_simd_level(ALL_LEVELS.index(name)) == name
            assert _blake3.set_simd_level(name) == name == _blake3.simd_level()
        for bad in ("avx-512", "", -1, len(ALL_LEVELS), 99):
            with pytest.raises(ValueError, match="unknown BLAKE3 SIMD level"):
                _blake3.set_simd_level(bad)
        with pytest.raises(TypeError):
            _blake3.set_simd_level(2.0)
    finally:
        _blake3.set_simd_level(before)


@pytest.mark.skipif(LEVELS == ALL_LEVELS, reason="this CPU has every level")
def test_set_simd_level_refuses_a_level_the_cpu_lacks_and_keeps_the_one_in_use() -> None:
    before = _blake3.simd_level()
    missing = next(name for name in ALL_LEVELS if name not in LEVELS)
    with pytest.raises(ValueError, match="this CPU cannot run"):
        _blake3.set_simd_level(missing)
    with pytest.raises(ValueError, match="this CPU cannot run"):
        _blake3.set_simd_level(ALL_LEVELS.index(missing))
    assert _blake3.simd_level() == before


def test_extended_output_refuses_bad_lengths_and_keys() -> None:
    with pytest.raises(ValueError, match="output length"):
        _blake3.extended(b"x", -1)
    with pytest.raises(ValueError, match="32 bytes"):
        _blake3.extended(b"x", 32, key=b"short")
    with pytest.raises(ValueError, match="piece"):
        _blake3.extended(b"x", 32, piece=-5)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.skipif(not X86_64, reason="the x86 levels are built for x86-64 targets only")
def test_the_avx512_level_is_built_from_avx512_instructions() -> None:
    # The level's C is tested bit for bit as avx512-on-avx2; what only AVX-512 CPUs run is the
    # compiler's instruction selection for it: zmm registers and vprord for the rotations.
    listing = subprocess.run(["objdump", "-d", _blake3.__file__], check=True, capture_output=True, text=True).stdout
    # At least the 32 rotations of one round's eight G functions (optimised builds unroll all
    # seven rounds, several times over; scripts/sanitize builds at -O1 and unrolls less).
    assert sum("vprord" in line and "zmm" in line for line in listing.splitlines()) >= 8 * 4


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.skipif(not ARM64, reason="the neon level is built for arm64 targets only")
def test_the_neon_level_is_built_from_neon_instructions() -> None:
    # Rotations by 12, 8 and 7 are a shift left and a shift-right-and-insert (sri) on four
    # 32-bit lanes: at least one round's eight G functions' worth of them.
    listing = subprocess.run(["objdump", "-d", _blake3.__file__], check=True, capture_output=True, text=True).stdout
    assert sum("\tsri\t" in line and ".4s" in line for line in listing.splitlines()) >= 8 * 3
