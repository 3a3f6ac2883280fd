"""zlib's rules walked ahead of the verify kernel (archive_rules_ahead.c): an extent walk with
``rules=True`` marks the deflate payloads zlib accepts on a thread of its own, and the kernel
given that walk reaches the same verdicts as one that walks every payload itself."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.snapshot import Snapshot
from tests.native.test_deflate_strict import forged  # noqa: F401  (a fixture)
from tests.native.test_verify_kernel import kernel, make_ledger


def _walk(reader: _archive.ArchiveReader, blocks, *, rules: bool) -> _archive.ExtentWalk:
    return reader.walk_extents(blocks.block_offset, blocks.disk_len, rules=rules)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    # A joined thread's /proc entry may outlive the join for a moment: wait for the state,
    # with a generous deadline, never for a time.
    deadline = time.monotonic() + 60.0
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture(scope="module", params=["deflate", "zstd"])
def sound(request, tmp_path_factory) -> tuple[str, Path]:
    directory = tmp_path_factory.mktemp(request.param)
    make_ledger(directory, rows=300, seed=11, codec=request.param, body_bytes=(100, 4000))
    return request.param, directory / "session.db"


def test_every_deflate_payload_of_a_sound_archive_passes_and_no_zstd_payload_is_walked(sound) -> None:
    codec, db = sound
    with Snapshot.open(db) as snapshot:
        blocks = snapshot.blocks()
        walk = _walk(snapshot.archive(), blocks, rules=True)
        assert walk.segment_count > len(blocks) >= 2
        assert walk.rules_settled() == (walk.segment_count if codec == "deflate" else 0)
        assert walk.rules_settled() == 0   # settled once: nothing is running any more


def test_a_walk_without_rules_walks_none(sound) -> None:
    _, db = sound
    with Snapshot.open(db) as snapshot:
        assert _walk(snapshot.archive(), snapshot.blocks(), rules=False).rules_settled() == 0


def test_the_payload_zlib_refuses_is_left_to_the_kernel_which_still_calls_it_damaged(forged) -> None:  # noqa: F811
    db, _ = forged
    want = kernel(db)
    assert want[0] == 0 and {f[8] for f in want[1]} == {"inflate"}
    with Snapshot.open(db) as snapshot:
        index = snapshot.index()
        walk = snapshot.walk_extents(index.blocks, rules=True)
        # Three segments: the forged one, the second body's and the FINAL one.
        assert walk.segment_count == 3 and walk.rules_settled() == 2
        for threads in (1, 2):
            done = _verify.run(snapshot, threads=threads)
            assert (done.verified, [tuple(f) for f in done.faults]) == want


def test_a_sound_archive_verifies_the_same_with_the_rules_walked_ahead(sound) -> None:
    _, db = sound
    want = kernel(db)
    assert want[1] == []
    with Snapshot.open(db) as snapshot:
        index = snapshot.index()
        walk = snapshot.walk_extents(index.blocks, rules=True)
        walk.rules_settled()
        done = _verify.run(snapshot, threads=2)
        assert (done.verified, [tuple(f) for f in done.faults]) == want


def test_the_kernel_started_while_the_rules_walk_runs_stops_it_and_walks_the_rest(sound) -> None:
    _, db = sound
    want = kernel(db)
    with Snapshot.open(db) as snapshot:
        index = snapshot.index()
        snapshot.walk_extents(index.blocks, rules=True)
        done = _verify.run(snapshot, threads=2)   # at once: the walk is stopped wherever it is
        assert (done.verified, [tuple(f) for f in done.faults]) == want
        assert snapshot.walk is not None and snapshot.walk.rules_settled() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc/self/task")
def test_a_walk_dropped_or_its_reader_closed_while_the_rules_run_leaves_no_thread(sound) -> None:
    _, db = sound
    before = _threads()
    for close_first in (False, True) * 10:
        with Snapshot.open(db) as snapshot:
            blocks = snapshot.blocks()
            reader = _archive.ArchiveReader(snapshot.bodies_path)
            walk = _walk(reader, blocks, rules=True)
            if close_first:
                reader.close()   # the rules walk reads through a descriptor of its own
            del walk
            reader.close()
    # No more than before (a thread of an earlier test may have ended since, never one more).
    _until(lambda: _threads() <= before, "a rules walk's thread outlived its walk")


def test_a_walk_with_failures_starts_no_rules_walk(sound, tmp_path: Path) -> None:
    # The kernel does not take a walk that found a bad extent: nothing to walk ahead for.
    _, db = sound
    with Snapshot.open(db) as snapshot:
        blocks = snapshot.blocks()
        lens = blocks.disk_len.copy()
        lens[0] += 1   # an extent that does not end on a segment boundary
        walk = snapshot.archive().walk_extents(blocks.block_offset, lens, rules=True)
        assert walk.failures and walk.segment_count > 0
        assert walk.rules_settled() == 0
