"""A stream of batches (``Ledger.body_batches``) writes into the same buffers batch after batch
once the consumer drops each one, and never into a buffer anything still holds: a batch the
caller keeps, a view of one of its bodies, an Arrow-style export of its bytes. Real ledgers in
temp dirs; the buffers are told apart by their memory addresses."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from capsem_core.bodies import read as bulk
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

MAX = 1536 << 10   # batches of at most 1.5 MiB: each over the pool's 1 MiB floor


@pytest.fixture(scope="module")
def large_bodies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    directory = tmp_path_factory.mktemp("buffers") / "ledger"
    rng = random.Random(7)
    bodies = [rng.randbytes(rng.randrange(150_000, 300_000)) for _ in range(40)]   # about 9 MiB
    with LedgerWriter(directory) as writer:
        for i, data in enumerate(bodies):
            writer.insert("net_events", {"event_id": f"{i:012x}", "timestamp": "2026-12-05T12:00:00Z",
                                         "domain": "example.com", "decision": "allowed"},
                          bodies=[Body("request", data, "http.request")])
    return directory, bodies


def _address(array: np.ndarray) -> int:
    base = array
    while isinstance(base.base, np.ndarray):
        base = base.base
    return int(base.__array_interface__["data"][0])


def test_a_stream_whose_consumer_drops_each_batch_reuses_its_buffers(large_bodies: tuple[Path, list[bytes]]) -> None:
    directory, bodies = large_bodies
    seen: set[int] = set()
    got: list[bytes] = []
    with Ledger(directory) as ledger:
        for batch in ledger.body_batches(max_bytes=MAX, threads=1):
            seen.add(_address(batch.buffer))
            got += [bytes(view) for view in batch]
            del batch
            gc.collect()
    assert got == bodies
    assert len(seen) <= 2   # far fewer regions than batches (about six here)


def test_a_batch_the_caller_keeps_is_never_written_over(large_bodies: tuple[Path, list[bytes]]) -> None:
    directory, bodies = large_bodies
    with Ledger(directory) as ledger:
        kept = list(ledger.body_batches(max_bytes=MAX, threads=1))
    assert len(kept) > 3 and len({_address(b.buffer) for b in kept}) == len(kept)
    assert [bytes(view) for batch in kept for view in batch] == bodies


def test_a_view_of_a_body_outlives_its_batch_with_its_own_bytes(large_bodies: tuple[Path, list[bytes]]) -> None:
    directory, bodies = large_bodies
    views = []
    with Ledger(directory) as ledger:
        for batch in ledger.body_batches(max_bytes=MAX, threads=1):
            views.append(batch[0])   # a zero-copy view into the batch's buffer
            del batch
            gc.collect()
    assert len(views) > 3
    first_of_each = [bytes(v) for v in views]
    assert all(any(data == body for body in bodies) for data in first_of_each)
    assert len(set(first_of_each)) == len(views)   # no later batch wrote over an earlier view


def test_the_pool_keeps_at_most_two_regions_and_hands_out_a_fresh_one_when_both_are_held() -> None:
    pool = bulk.BufferPool()
    a, b = pool.take(2 << 20, 2 << 20), pool.take(2 << 20, 2 << 20)
    c = pool.take(2 << 20, 2 << 20)
    assert len({_address(x) for x in (a, b, c)}) == 3
    held = {_address(x) for x in (a, b, c)}
    del a, b, c
    gc.collect()
    again = [pool.take(1 << 20, 2 << 20) for _ in range(2)]
    assert {_address(x) for x in again} <= held and len(pool._free) == 0
    assert pool.take(1 << 10, 2 << 20).nbytes == 1 << 10   # below the floor: a plain array


@pytest.mark.skipif(bool(os.environ.get("CAPSEM_SANITIZE")),
                    reason="under scripts/sanitize ASan reserves its shadow memory at start: an address-space limit "
                           "aborts it before the test runs")
def test_a_buffer_the_system_cannot_give_is_a_memory_error_not_an_os_error() -> None:
    # An address-space limit stands in for a machine out of memory.
    code = ("import resource\nresource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from capsem_core.bodies.read import new_buffer\n"
            "try:\n    new_buffer(3 << 30)\nexcept MemoryError as exc:\n    print(type(exc).__name__, exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("MemoryError cannot allocate a batch buffer of "), \
        done.stdout + done.stderr
