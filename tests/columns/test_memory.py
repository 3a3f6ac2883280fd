"""A scan read batch by batch holds a few batches at a time, however large the table: each
batch is freed when the consumer drops it, and the workers fill only a window ahead. Measured
as the growth of a child process's peak resident memory (oracles/scan_memory.py), against
the Arrow bytes of the whole table; the same child holding every batch shows the probe sees
batches kept."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from capsem_core.writer import LedgerWriter
from oracles.scan_memory import CLEAR_REFS, peak_in_child

pytestmark = pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux's /proc/self/clear_refs")

ROWS = 16000          # of about 3 KB each: a table of about 48 MB as Arrow
BATCH_BYTES = 256 << 10
THREADS = 2


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("memory") / "ledger"
    LedgerWriter(directory).close()
    conn = sqlite3.connect(directory / "session.db", isolation_level=None)
    conn.execute(f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) "
                 "INSERT INTO transport_events (timestamp_unix_ms, event_id, event_type, network_id, event_json) "
                 "SELECT i, printf('%012x', i), 'network.probe', 'n' || (i % 7), "
                 "json_array(printf('%.*c', 3000, 'x'), i) FROM n")
    conn.close()
    return directory


def _few_batches(measured: dict[str, int]) -> int:
    """What a stream may hold at its peak: a batch in each worker's hands and in each waiting
    slot (threads + 1), the one the consumer reads, one more for the allocator's rounding,
    and 2 MiB for the interpreter's own."""
    return (2 * THREADS + 3) * measured["batch_bytes_max"] + (2 << 20)


@pytest.mark.skipif(bool(os.environ.get("CAPSEM_SANITIZE")),
                    reason="under scripts/sanitize ASan's shadow memory and quarantine set the peak, not the batches")
@pytest.mark.parametrize("path", [None, "rows"], ids=["pages", "statements"])
def test_a_table_read_batch_by_batch_keeps_a_few_batches_in_memory_not_the_table(ledger: Path,
                                                                                  path: str | None) -> None:
    streamed = peak_in_child(ledger, "transport_events", threads=THREADS, batch_rows=1 << 16,
                             batch_bytes=BATCH_BYTES, path=path)
    assert streamed["rows"] == ROWS and streamed["pages"] == (path is None)
    assert streamed["batches"] >= 100 and streamed["table_bytes"] >= 40 << 20
    bound = _few_batches(streamed)
    assert bound * 4 < streamed["table_bytes"]   # "a few batches" is far from the table
    assert streamed["peak_growth"] <= bound, streamed


def test_the_probe_sees_a_consumer_that_keeps_every_batch(ledger: Path) -> None:
    held = peak_in_child(ledger, "transport_events", threads=THREADS, batch_rows=1 << 16, batch_bytes=BATCH_BYTES,
                         hold=True)
    assert held["peak_growth"] >= held["table_bytes"] * 3 // 4, held
