"""Remembered segments: a reader with a cache remembers each segment it verified, and a
checked read that misses the cache but lies in remembered segments inflates only what it needs
without hashing those segments again. It returns the same bytes as a fresh reader; a segment
changed since it was verified, or bytes that do not match the body hash, are read again through
a cursor and refused exactly as a fresh reader refuses them; without a cache nothing is
remembered; the table stays within its share of the budget."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from capsem_core import errors
from capsem_core._native import _blake3
from capsem_core._native._archive import ArchiveReader
from capsem_core.writer import BodyArchiveWriter

from tests.native.test_archive_reader import segment_offsets

Ref = tuple[int, int, int]


def _archive(path: Path, seed: int, *, blocks: int = 4, segments: int = 6, close_last: bool = True,
             ) -> tuple[list[Ref], list[bytes]]:
    """Blocks of several segments of text that repeats across them (matches reach back into
    earlier segments) and noise; the refs and bodies in archive order."""
    rng = random.Random(seed)
    w = BodyArchiveWriter(path)
    refs, bodies = [], []
    for block in range(blocks):
        for _ in range(segments):
            for _ in range(rng.randint(1, 3)):
                data = (f"seed {seed} line {rng.randint(0, 40)} " * rng.randint(1, 3000)).encode()
                data += rng.randbytes(rng.randint(0, 500))
                refs.append(w.stage(data))
                bodies.append(data)
            w.flush_segment()
        if close_last or block < blocks - 1:
            w.close_block()
    w.sync()
    w.close()
    return refs, bodies


def _digest(data: bytes) -> bytes:
    return _blake3.digest(data)


def _outcome(reader: ArchiveReader, ref: Ref, expected: bytes | str) -> tuple[str, str]:
    try:
        return "bytes", reader.read_verified(*ref, expected).hex()
    except errors.ArchiveError as exc:
        return type(exc).__name__, str(exc)


def _block_bytes(refs: list[Ref]) -> int:
    return max(off + n for _, off, n in refs)


@pytest.mark.parametrize("seed", range(4))
def test_a_miss_in_remembered_segments_reads_the_same_bytes_as_a_fresh_reader(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, seed)
    # Room for about one block: most reads that move between blocks miss the cache.
    reader = ArchiveReader(path, _block_bytes(refs) + (300 << 10))
    order = list(range(len(refs))) * 3
    random.Random(seed).shuffle(order)
    for i in order:
        assert reader.read_verified(*refs[i], _digest(bodies[i])) == bodies[i]
    reads, segments = reader.verified_reads
    assert reads > len(order) // 3 and segments >= reads
    assert reader.remembered_segments == len({ref[0] for ref in refs}) * 6
    # Each such read starts its block's inflating again, and is counted so.
    assert reader.blocks_inflated >= reads


def test_plain_reads_never_come_from_remembered_segments(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 7)
    reader = ArchiveReader(path, _block_bytes(refs) + (300 << 10))
    for ref, data in list(zip(refs, bodies)) * 2:
        assert reader.read(*ref) == data
    assert reader.remembered_segments > 0 and reader.verified_reads == (0, 0)


def test_without_a_cache_nothing_is_remembered(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 3)
    reader = ArchiveReader(path)
    for ref, data in list(zip(refs, bodies))[::-1]:
        assert reader.read_verified(*ref, _digest(data)) == data
    assert reader.remembered_segments == 0 and reader.verified_reads == (0, 0)


def _remember_then_leave(path: Path, refs: list[Ref], bodies: list[bytes]) -> ArchiveReader:
    """A reader that verified every segment of the first block, then moved to another block
    and evicted it (its cache holds one block)."""
    reader = ArchiveReader(path, _block_bytes(refs) + (300 << 10))
    first = refs[0][0]
    last = max(i for i, ref in enumerate(refs) if ref[0] == first)
    assert reader.read_verified(*refs[last], _digest(bodies[last])) == bodies[last]
    other = next(i for i, ref in enumerate(refs) if ref[0] != first)
    far = max(i for i, ref in enumerate(refs) if ref[0] == refs[other][0])
    assert reader.read_verified(*refs[far], _digest(bodies[far])) == bodies[far]
    assert reader.cached_blocks == 1 and reader.remembered_segments >= 12
    return reader


def _payload_byte_of(path: Path, refs: list[Ref], i: int) -> int:
    """A file offset inside the compressed payload of the segment holding body i."""
    offsets = segment_offsets(path, refs[i][0])
    data = path.read_bytes()
    raw = 0
    for at in offsets:
        raw_len, comp_len = (int.from_bytes(data[at + k:at + k + 4], "little") for k in (12, 16))
        if raw + raw_len > refs[i][1]:
            return at + 52 + comp_len // 2
        raw += raw_len
    raise AssertionError("no segment holds the body")


def _write_in_place(path: Path, at: int, mask: int = 0x01) -> None:
    # In place, so the reader's map sees it (a rename would be a replaced file).
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ mask]))


@pytest.mark.parametrize("expected", ["digest", "malformed text"])
@pytest.mark.parametrize("where", ["payload", "header hash", "header raw_len"])
def test_a_segment_changed_after_it_was_verified_is_refused_as_a_fresh_reader_refuses_it(
        tmp_path: Path, where: str, expected: str) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 11)
    reader = _remember_then_leave(path, refs, bodies)
    i = 2  # a body of the first block, evicted from the cache
    at = _payload_byte_of(path, refs, i)
    seg = max(s for s in segment_offsets(path, refs[i][0]) if s < at)
    _write_in_place(path, {"payload": at, "header hash": seg + 30, "header raw_len": seg + 13}[where])
    want: bytes | str = _digest(bodies[i]) if expected == "digest" else "blake3:nothex"
    got = _outcome(reader, refs[i], want)
    assert got == _outcome(ArchiveReader(path), refs[i], want)
    assert got[0] not in ("bytes", "BodyHashMismatch")


@pytest.mark.parametrize("wrong", ["blake3:" + "ab" * 32, "blake3:not-a-digest"])
def test_a_body_hash_that_does_not_match_is_checked_again_through_a_cursor(tmp_path: Path, wrong: str) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 5)
    reader = _remember_then_leave(path, refs, bodies)
    got = _outcome(reader, refs[1], wrong)
    assert got == _outcome(ArchiveReader(path), refs[1], wrong)
    assert got[0] == "BodyHashMismatch"
    # Every remembered segment was forgotten, and the cursor's read remembered its block again.
    assert 0 < reader.remembered_segments <= 6
    assert reader.read_verified(*refs[1], _digest(bodies[1])) == bodies[1]


def test_a_file_cut_short_after_its_segments_were_remembered_fails_as_without_them(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 9)
    reader = _remember_then_leave(path, refs, bodies)
    plain = ArchiveReader(path)   # no cache: the same map, nothing remembered
    for ref, data in zip(refs, bodies):
        plain.read_verified(*ref, _digest(data))
    last = max(i for i, ref in enumerate(refs) if ref[0] == refs[0][0])
    os.truncate(path, _payload_byte_of(path, refs, last))
    got = _outcome(reader, refs[last], _digest(bodies[last]))
    assert got[0] in {"TruncatedBlock", "BadSegment"}, got
    assert got == _outcome(plain, refs[last], _digest(bodies[last]))


def test_segments_appended_to_an_open_block_after_a_read_are_verified_when_first_read(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    first = w.stage(b"first body " * 3000)
    w.flush_segment()
    w.sync()
    reader = ArchiveReader(path, 4 << 20)
    assert reader.read_verified(*first, _digest(b"first body " * 3000)) == b"first body " * 3000
    second = w.stage(b"second body " * 3000)
    w.flush_segment()
    w.sync()
    assert reader.read_verified(*second, _digest(b"second body " * 3000)) == b"second body " * 3000
    w.close_block()
    w.close()
    assert reader.remembered_segments == 2


def _most_while_reading(reader: ArchiveReader, refs: list[Ref], bodies: list[bytes], seed: int,
                        measure: Callable[[ArchiveReader], int]) -> int:
    """Read every body twice in a shuffled order, each checked against what was written; the
    largest ``measure`` of the reader after a read."""
    order = list(range(len(refs))) * 2
    random.Random(seed).shuffle(order)
    most = 0
    for i in order:
        assert reader.read_verified(*refs[i], _digest(bodies[i])) == bodies[i]
        most = max(most, measure(reader))
    return most


def test_the_remembered_table_stays_within_a_sixteenth_of_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 13, blocks=24, segments=20)
    budget = 256 << 10   # a table of at most 16 KiB: 256 slots, 192 segments remembered
    reader = ArchiveReader(path, budget)
    most = _most_while_reading(reader, refs, bodies, 13, lambda r: r.remembered_segments)
    assert 0 < most <= 192 < 24 * 20


def test_the_reader_holds_its_budget_and_at_most_the_block_read_last(tmp_path: Path) -> None:
    path = tmp_path / "session.bodies"
    refs, bodies = _archive(path, 17, blocks=6)
    largest = _block_bytes(refs)
    budget = largest // 2   # less than a block: one cursor, and the scratch must go between reads
    reader = ArchiveReader(path, budget)
    most = _most_while_reading(reader, refs, bodies, 17, lambda r: r.held_bytes)
    assert reader.verified_reads[0] > 0
    # The budget, plus one block's buffer (sized to it in 256 KiB steps) and its inflate state.
    assert most <= budget + largest + (256 << 10) + (48 << 10)
