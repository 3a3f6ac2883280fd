"""_warc.GzipMembers: records into gzip members, one each, in input order, whatever the
thread count; every span checked before anything is compressed."""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np
import pytest

from capsem_core._native import _warc


def _members(data: bytes, sizes: np.ndarray) -> list[bytes]:
    out, at = [], 0
    for size in sizes.tolist():
        member = data[at:at + size]
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(d.decompress(member))
        assert d.eof and d.unused_data == b"", "a member is exactly one whole gzip stream"
        at += size
    assert at == len(data)
    return out


def _records(n: int, seed: int = 3) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    rng = np.random.default_rng(seed)
    heads, head_offsets, bodies, body_offsets, body_lengths = [], [0], [], [], []
    at = 0
    for i in range(n):
        head = f"record {i}\r\n".encode()
        body = bytes(rng.integers(0, 4, int(rng.integers(0, 5000)), np.uint8)) + os.urandom(int(rng.integers(0, 64)))
        heads.append(head)
        head_offsets.append(head_offsets[-1] + len(head))
        bodies.append(body)
        body_offsets.append(at)
        body_lengths.append(len(body))
        at += len(body)
    want = [h + b + b"\r\n\r\n" for h, b in zip(heads, bodies)]
    return (b"".join(heads), np.array(head_offsets), np.frombuffer(b"".join(bodies), np.uint8),
            np.array(body_offsets), np.array(body_lengths), want)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_every_record_is_one_member_in_input_order(threads: int) -> None:
    heads, ho, bodies, bo, bl, want = _records(200)
    out, total, sizes = _warc.GzipMembers(6, threads).compress(heads, ho, bodies, bo, bl, b"\r\n\r\n")
    assert _members(bytes(out[:total]), sizes) == want
    # The concatenation is one valid multi-member gzip file too.
    assert gzip.decompress(bytes(out[:total])) == b"".join(want)


def test_the_output_does_not_depend_on_the_thread_count() -> None:
    heads, ho, bodies, bo, bl, _ = _records(120, seed=9)
    one = _warc.GzipMembers(6, 1).compress(heads, ho, bodies, bo, bl, b"\r\n\r\n")
    four = _warc.GzipMembers(6, 4).compress(heads, ho, bodies, bo, bl, b"\r\n\r\n")
    assert bytes(one[0][:one[1]]) == bytes(four[0][:four[1]])
    assert np.array_equal(one[2], four[2])


@pytest.mark.parametrize("level", [0, 1, 6, 12])
def test_every_libdeflate_level_makes_members_gzip_reads(level: int) -> None:
    heads, ho, bodies, bo, bl, want = _records(20, seed=level)
    out, total, sizes = _warc.GzipMembers(level, 2).compress(heads, ho, bodies, bo, bl, b"\r\n\r\n")
    assert _members(bytes(out[:total]), sizes) == want


def test_a_bodies_only_pass_compresses_the_bodies_in_place() -> None:
    _, _, bodies, bo, bl, _ = _records(30)
    out, total, sizes = _warc.GzipMembers(6, 2).compress(b"", np.zeros(31, np.int64), bodies, bo, bl)
    got = _members(bytes(out[:total]), sizes)
    assert got == [bytes(bodies[a:a + n]) for a, n in zip(bo.tolist(), bl.tolist())]


def test_an_output_array_large_enough_is_reused_and_a_small_one_replaced() -> None:
    heads, ho, bodies, bo, bl, want = _records(10)
    g = _warc.GzipMembers(6, 2)
    big = np.zeros(1 << 20, np.uint8)
    out, total, sizes = g.compress(heads, ho, bodies, bo, bl, b"\r\n\r\n", out=big)
    assert out is big and _members(bytes(out[:total]), sizes) == want
    small = np.zeros(16, np.uint8)
    out, total, sizes = g.compress(heads, ho, bodies, bo, bl, b"\r\n\r\n", out=small)
    assert out is not small and _members(bytes(out[:total]), sizes) == want
    assert not small.any(), "an array too small is never written"


@pytest.mark.parametrize("case, message", [
    ("head past the end", "header span"), ("head backwards", "header span"), ("negative head", "header span"),
    ("body past the end", "body span"), ("negative body", "body span"), ("negative length", "body span"),
    ("huge length", "body span"),
])
def test_a_span_outside_its_buffer_is_refused_before_anything_is_compressed(case: str, message: str) -> None:
    heads, ho, bodies, bo, bl, _ = _records(5)
    ho, bo, bl = ho.copy(), bo.copy(), bl.copy()
    if case == "head past the end":
        ho[-1] = len(heads) + 1
    elif case == "head backwards":
        ho[2] = ho[3] + 1
    elif case == "negative head":
        ho[0] = -1
    elif case == "body past the end":
        bo[4] = len(bodies) - bl[4] + 1
    elif case == "negative body":
        bo[1] = -5
    elif case == "negative length":
        bl[1] = -1
    else:
        bl[1] = 2**62
    out = np.zeros(1 << 20, np.uint8)
    with pytest.raises(ValueError, match=message):
        _warc.GzipMembers(6, 2).compress(heads, ho, bodies, bo, bl, b"\r\n\r\n", out=out)
    assert not out.any()


def test_a_record_over_the_bound_is_refused() -> None:
    big = np.zeros(_warc.MAX_RECORD_BYTES, np.uint8)
    with pytest.raises(ValueError, match="exceed"):
        _warc.GzipMembers(0, 1).compress(b"x", [0, 1], big, [0], [len(big)])


def test_mismatched_arrays_levels_and_thread_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="one entry more"):
        _warc.GzipMembers(6, 1).compress(b"", [0, 0], b"ab", [0, 1], [1, 1])
    for level in (-1, 13):
        with pytest.raises(ValueError, match="level"):
            _warc.GzipMembers(level, 1)
    for threads in (0, _warc.MAX_THREADS + 1):
        with pytest.raises(ValueError, match="threads"):
            _warc.GzipMembers(6, threads)


def test_no_records_make_no_bytes() -> None:
    out, total, sizes = _warc.GzipMembers(6, 2).compress(b"", [0], b"", [], [])
    assert total == 0 and sizes.shape == (0,)
