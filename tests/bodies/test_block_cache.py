"""read_body's cache of inflated blocks: hits inflate nothing (ArchiveReader counters),
the cache stays within its byte budget, and one Ledger serves many threads correctly."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from capsem_core.ledger import Ledger

Key = tuple[str, str, str]


def _by_block(ledger: Ledger) -> dict[int, list[Key]]:
    idx = ledger.index()
    out: dict[int, list[Key]] = {}
    for i in range(len(idx)):
        out.setdefault(int(idx.block_offset[i]), []).append(idx.key(i))  # type: ignore[arg-type]
    return out


def test_reads_that_land_in_cached_blocks_inflate_nothing_again(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    with Ledger(directory) as ledger:
        blocks = _by_block(ledger)
        a, b = list(blocks)[:2]
        for key in blocks[a] + blocks[b]:
            assert ledger.read_body(*key) == written[key]
        inflated, segments = ledger._archive.blocks_inflated, ledger._archive.segments_inflated
        assert inflated == 2
        for _ in range(3):  # back and forth between the two blocks, every body, in reverse
            for key in reversed(blocks[a] + blocks[b]):
                assert ledger.read_body(*key) == written[key]
        assert (ledger._archive.blocks_inflated, ledger._archive.segments_inflated) == (inflated, segments)
        assert ledger._archive.cached_blocks == 2


def test_without_a_cache_alternating_blocks_inflate_each_time(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    with Ledger(directory, block_cache_bytes=0) as ledger:
        blocks = _by_block(ledger)
        a, b = list(blocks)[:2]
        for _ in range(3):
            for key in (blocks[a][0], blocks[b][0]):
                assert ledger.read_body(*key) == written[key]
        assert ledger._archive.blocks_inflated == 6
        assert ledger._archive.cached_blocks == 1


def test_the_cache_keeps_within_its_byte_budget_dropping_the_least_recently_used(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    # Room for three blocks of about 1 MiB (a buffer is sized to its block in 256 KiB steps,
    # plus 48 KiB of inflate state each), never four.
    with Ledger(directory, block_cache_bytes=5 << 20) as ledger:
        blocks = _by_block(ledger)
        order = list(blocks)
        assert len(order) >= 5
        for block in order:
            key = blocks[block][-1]  # the block's last body: its whole raw prefix inflated
            assert ledger.read_body(*key) == written[key]
            assert ledger._archive.cached_blocks <= 3
        before = ledger._archive.blocks_inflated
        assert ledger.read_body(*blocks[order[-1]][0]) == written[blocks[order[-1]][0]]
        assert ledger._archive.blocks_inflated == before  # the most recent block is still cached
        assert ledger.read_body(*blocks[order[0]][0]) == written[blocks[order[0]][0]]
        assert ledger._archive.blocks_inflated == before + 1  # the oldest was dropped


def test_one_ledger_serves_many_threads_reading_at_random(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    keys = list(written)
    wrong: list[Key] = []
    failures: list[BaseException] = []
    with Ledger(directory, block_cache_bytes=3 << 20) as ledger:
        def reader(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(60):
                    key = rng.choice(keys)
                    if ledger.read_body(*key) != written[key]:
                        wrong.append(key)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        bulk = ledger.read_bodies()  # a bulk read meanwhile takes its turn too
        for t in threads:
            t.join()
    assert failures == [] and wrong == []
    assert len(bulk) == len(keys)


def test_random_reads_past_the_cache_come_from_remembered_segments_and_are_right(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    keys = list(written)
    rng = random.Random(4)
    # Room for about two of the ~1 MiB blocks: most reads miss the cache once every block is read.
    with Ledger(directory, block_cache_bytes=3 << 20) as ledger:
        for _ in range(400):
            key = rng.choice(keys)
            assert ledger.read_body(*key) == written[key]
        reads, _segments = ledger._archive.verified_reads
        assert reads > 100
        assert ledger._archive.cached_blocks <= 2
