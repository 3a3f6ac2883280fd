"""_archive.hash_extents: the fingerprints the verification record keeps, checked against an
independent computation (the `blake3` package over the file's bytes, segment headers parsed by
the pure-Python oracle), on 1 and several threads, and on extents that are not in the file."""

from __future__ import annotations

from pathlib import Path

import blake3
import numpy as np
import pytest
from tests.check.test_check import sql, write_ledger
from tests.check.test_incremental import append

from capsem_core._native import _archive
from capsem_core.format import SEGMENT_HEADER_BYTES
from oracles.archive_reader import parse_segment


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = write_ledger(tmp_path_factory.mktemp("extents") / "sess")
    append(db.parent, 5)
    return db


def extents(db: Path) -> list[tuple[int, int]]:
    return [tuple(r) for r in sql(db, "SELECT block_offset, disk_len FROM body_blocks ORDER BY block_offset")]


def segment_digest(data: bytes, off: int, disk: int) -> bytes:
    at, end, raw, h = off + 8, off + disk, 0, blake3.blake3()
    while at < end:
        seg = parse_segment(data[at:at + SEGMENT_HEADER_BYTES], at, raw)
        h.update(seg.digest)
        raw += seg.raw_len
        at += SEGMENT_HEADER_BYTES + seg.comp_len
    return h.digest()


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_fingerprints_are_the_blake3_of_the_extent_and_of_its_segment_hashes(ledger: Path, threads: int) -> None:
    data = ledger.with_suffix(".bodies").read_bytes()
    ext = extents(ledger)
    with _archive.ArchiveReader(ledger.with_suffix(".bodies")) as reader:
        prints = _archive.hash_extents(reader, [o for o, _ in ext], [d for _, d in ext], threads=threads)
    assert prints.status.tolist() == [_archive.EXTENT_HASHED] * len(ext)
    for i, (off, disk) in enumerate(ext):
        assert bytes(prints.disk_hash[i]) == blake3.blake3(data[off:off + disk]).digest()
        assert bytes(prints.segments[i]) == segment_digest(data, off, disk)


def test_an_extent_outside_the_file_is_past_end_and_one_off_a_segment_boundary_unchained(ledger: Path) -> None:
    bodies = ledger.with_suffix(".bodies")
    size = bodies.stat().st_size
    off, disk = extents(ledger)[0]
    with _archive.ArchiveReader(bodies) as reader:
        prints = _archive.hash_extents(reader, [-1, size - 4, off, 0, off],
                                       [10, 5, disk - 1, 0, disk], threads=2)
    assert prints.status.tolist() == [_archive.EXTENT_PAST_END, _archive.EXTENT_PAST_END,
                                      _archive.EXTENT_UNCHAINED, _archive.EXTENT_UNCHAINED,
                                      _archive.EXTENT_HASHED]
    assert not prints.disk_hash[0].any() and not prints.disk_hash[1].any()
    assert bytes(prints.disk_hash[2]) == blake3.blake3(bodies.read_bytes()[off:off + disk - 1]).digest()


def test_no_extents_is_an_empty_result_and_mismatched_arrays_are_refused(ledger: Path) -> None:
    with _archive.ArchiveReader(ledger.with_suffix(".bodies")) as reader:
        prints = _archive.hash_extents(reader, np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert prints.disk_hash.shape == (0, 32) and prints.status.shape == (0,)
        with pytest.raises(ValueError, match="differ in length"):
            _archive.hash_extents(reader, [16, 32], [1])
    with pytest.raises(ValueError, match="closed"):
        _archive.hash_extents(reader, [16], [1])


def test_the_map_is_refreshed_so_bytes_appended_since_open_are_hashed(ledger: Path, tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "grow", second_block=False)
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
        append(db.parent, 1, seed=77)
        off, disk = extents(db)[-1]
        prints = _archive.hash_extents(reader, [off], [disk])
    assert prints.status.tolist() == [_archive.EXTENT_HASHED]
    assert bytes(prints.disk_hash[0]) == blake3.blake3(db.with_suffix(".bodies").read_bytes()[off:off + disk]).digest()
