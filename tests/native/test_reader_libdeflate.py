"""The reader's libdeflate path: a deflate block's segments inflated with libdeflate first,
zlib's stream taking over where that fails. Whatever the damage and whatever was read before,
a reader with it returns the same bytes and raises the same error as Capsem's zlib reader."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from capsem_core import errors
from capsem_core._native._archive import ArchiveReader
from capsem_core.writer import BodyArchiveWriter

from tests.native.test_archive_reader import FIELDS, flip, segment_offsets, write_block


def _outcome(reader: ArchiveReader, ref: tuple[int, int, int]) -> tuple[str, str]:
    try:
        return "bytes", reader.read(*ref).hex()
    except errors.ArchiveError as exc:
        return type(exc).__name__, str(exc)


def _both(path: Path, cache_bytes: int = 0) -> tuple[ArchiveReader, ArchiveReader]:
    return (ArchiveReader(path, cache_bytes, use_libdeflate=True),
            ArchiveReader(path, cache_bytes, use_libdeflate=False))


def test_a_reader_uses_libdeflate_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    write_block(path, [100])
    assert ArchiveReader(path).uses_libdeflate
    assert not ArchiveReader(path, use_libdeflate=False).uses_libdeflate


@pytest.mark.parametrize("seed", range(6))
def test_every_body_reads_the_same_with_libdeflate_in_any_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    refs, bodies = [], []
    for _block in range(3):
        for _segment in range(rng.randint(1, 12)):
            for _ in range(rng.randint(1, 4)):
                # Text that repeats across segments, so matches reach back into earlier ones.
                data = (f"seed {seed} line {rng.randint(0, 50)} " * rng.randint(1, 4000)).encode()
                data += rng.randbytes(rng.randint(0, 300))
                refs.append(w.stage(data))
                bodies.append(data)
            w.flush_segment()
        w.close_block()
    w.sync()
    w.close()
    order = list(range(len(refs)))
    rng.shuffle(order)
    for cache in (0, 8 << 20):
        fast, slow = _both(path, cache)
        for i in order + order[::-1]:
            assert fast.read(*refs[i]) == bodies[i]
            assert slow.read(*refs[i]) == bodies[i]
        # The same segments inflated, by either path.
        assert fast.segments_inflated == slow.segments_inflated


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("k", range(4))
def test_damage_to_segment_k_raises_what_the_zlib_reader_raises(tmp_path: Path, field: str, k: int) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = write_block(path, [400, 900, 300, 600])
    segs = segment_offsets(path)
    ends = segs[1:] + [path.stat().st_size]
    flip(path, ends[k] - 1 if field == "last" else segs[k] + FIELDS[field], 0x10 if field == "raw_len" else 0x01)
    # A fresh reader per body, and one reader for all: the second has read the segments before
    # k with libdeflate, so zlib's stream takes over mid-block from the window it is given
    # (a hash mismatch's message carries the digest of the bytes zlib inflated).
    for ref in refs:
        fast, slow = _both(path)
        assert _outcome(fast, ref) == _outcome(slow, ref)
    fast, slow = _both(path)
    for ref in refs:
        assert _outcome(fast, ref) == _outcome(slow, ref)
    for i, ref in enumerate(refs[:k]):
        assert ArchiveReader(path).read(*ref) == bodies[i]


def test_a_segment_past_an_unflushed_tail_is_read_once_the_writer_flushes_it(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    first = w.stage(b"first " * 5000)
    w.flush_segment()
    w.sync()
    reader = ArchiveReader(path)
    assert reader.read(*first) == b"first " * 5000
    second = w.stage(b"second " * 5000)
    w.flush_segment()
    w.sync()
    # libdeflate read the first segment; the second comes after the map is refreshed.
    assert reader.read(*second) == b"second " * 5000
    w.close_block()
    w.close()


def test_a_cached_block_of_the_largest_size_costs_its_size_not_twice(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    refs = []
    for block in range(2):
        piece = (bytes([65 + block]) * 1024 + random.Random(block).randbytes(1024)) * 512   # 1 MiB
        for _ in range(16):
            refs.append(w.stage(piece))
        w.close_block()
    w.sync()
    w.close()
    assert {ref[0] for ref in refs[:16]} != {ref[0] for ref in refs[16:]}
    # Room for two 16 MiB blocks (with the window and the inflate state) and the remembered
    # segments' smallest table (64 slots of 64 bytes), but not for two buffers doubled past a
    # block's size.
    reader = ArchiveReader(path, 2 * ((16 << 20) + (256 << 10) + (48 << 10)) + 64 * 64)
    for ref in (refs[15], refs[31], refs[15], refs[31]):
        assert len(reader.read(*ref)) == 1 << 20
    assert reader.cached_blocks == 2 and reader.blocks_inflated == 2
