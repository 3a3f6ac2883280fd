"""KernelBuffers: the kernel's working buffers lent to run after run. Runs that borrow them
verify and hand out exactly what runs with their own buffers do, whatever came before (a run
that failed, another thread count, the other codec); they go to one run at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import scans as _index
from capsem_core._native import _archive

from tests.native.test_verify_kernel import _flip, _segments, make_ledger


def _arrays(db: Path) -> tuple[dict, dict]:
    return _index.scan_blocks(db), _index.scan_bodies(db, threads=1)


def _run(reader: _archive.ArchiveReader, blocks: dict, bodies: dict, lo: int, hi: int, threads: int,
         buffers: _archive.KernelBuffers | None) -> tuple[list[int], bytes]:
    part = {k: v[lo:hi] for k, v in bodies.items()}
    lens = part["body_len"]
    offsets = np.zeros(hi - lo, np.int64)
    np.cumsum(lens[:-1], out=offsets[1:])
    out = np.zeros(int(lens.sum()), np.uint8)
    outcome = _archive.verify_bodies_with(reader, blocks, part, threads, out=out, out_offset=offsets, buffers=buffers)
    return outcome.status.tolist(), out.tobytes()


@pytest.mark.parametrize("codec", ["deflate", "zstd"])
def test_batches_that_borrow_buffers_read_what_batches_with_their_own_read(tmp_path: Path, codec: str) -> None:
    db = make_ledger(tmp_path, rows=200, seed=5, codec=codec, body_bytes=(200, 30000))
    blocks, bodies = _arrays(db)
    n = bodies["body_len"].shape[0]
    cuts = [0, 7, 60, 61, 150, 290, n]
    lent = _archive.KernelBuffers()
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
        for threads in (1, 2, 1, 3):
            for lo, hi in zip(cuts, cuts[1:]):
                own = _run(reader, blocks, bodies, lo, hi, threads, None)
                assert _run(reader, blocks, bodies, lo, hi, threads, lent) == own
                assert set(own[0]) == {0}


def test_a_run_after_a_failed_run_on_the_same_buffers_is_sound(tmp_path: Path) -> None:
    db = make_ledger(tmp_path, rows=200, seed=6, body_bytes=(200, 30000))
    blocks, bodies = _arrays(db)
    n = bodies["body_len"].shape[0]
    first = int(blocks["block_offset"][0])
    at, _comp = _segments(db.with_suffix(".bodies"), first)[0]
    _flip(db.with_suffix(".bodies"), at + 52 + 10)   # the first block's first payload
    in_first = int(np.count_nonzero(bodies["block_offset"] == first))
    lent = _archive.KernelBuffers()
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader:
        status, _ = _run(reader, blocks, bodies, 0, in_first, 1, lent)
        assert all(status)   # every body of the damaged block failed
        assert _run(reader, blocks, bodies, in_first, n, 1, lent) == _run(reader, blocks, bodies, in_first, n, 1, None)


def test_buffers_are_lent_to_one_run_at_a_time(tmp_path: Path) -> None:
    db = make_ledger(tmp_path, rows=300, seed=7, body_bytes=(200, 30000))
    blocks, bodies = _arrays(db)
    lent = _archive.KernelBuffers()
    refused: list[BaseException] = []
    with _archive.ArchiveReader(db.with_suffix(".bodies")) as reader, \
            _archive.ArchiveReader(db.with_suffix(".bodies")) as other:
        def progress(_bytes: int, _bodies: int) -> None:
            if not refused:
                try:
                    _archive.verify_bodies_with(other, blocks, bodies, 1, buffers=lent)
                except RuntimeError as exc:
                    refused.append(exc)
        _archive.verify_bodies_with(reader, blocks, bodies, 1, progress, buffers=lent)
        assert len(refused) == 1 and "one kernel run at a time" in str(refused[0])
        # Given back: the next run may borrow them.
        assert not _archive.verify_bodies_with(other, blocks, bodies, 1, buffers=lent).status.any()
