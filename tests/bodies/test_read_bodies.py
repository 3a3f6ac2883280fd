"""Ledger.read_bodies / body_batches / index: every selection form, the batch's buffer and
views, max_bytes batching, and damage in each errors mode, checked against the independent
pure-Python reader (oracles/archive_reader.py) on real ledgers in temp dirs."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from capsem_core import errors
from capsem_core import format as fmt
from capsem_core import ledger as ledger_module
from capsem_core.bodies import BodyBatch
from capsem_core.bodies import read as bulk
from capsem_core.ledger import Ledger
from oracles.archive_reader import archived_bodies
from tests.bodies.conftest import write_blocks_ledger

Key = tuple[str, str, str]


def _batch_map(batch: BodyBatch) -> dict[Key, bytes]:
    return {batch.key(i): bytes(batch[i]) for i in range(len(batch))}  # type: ignore[misc]


def _block_offsets(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT block_offset FROM body_blocks ORDER BY block_offset")]


def _flip_payload(directory: Path, block_offset: int) -> None:
    at = block_offset + fmt.BLOCK_HEADER_BYTES + fmt.SEGMENT_HEADER_BYTES + 40
    with open(directory / "session.bodies", "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


def test_every_body_reads_in_archive_order_as_the_pure_python_reader_reads_it(sample_ledger: Path) -> None:
    want = archived_bodies(sample_ledger / "session.db")
    with Ledger(sample_ledger) as ledger:
        batch = ledger.read_bodies(threads=2)
    assert len(batch) == len(want) > 1000
    assert [batch.key(i) for i in range(len(batch))] == [(b.event_id, b.source_table, b.direction) for b in want]
    assert all(bytes(batch[i]) == b.data for i, b in enumerate(want))
    assert [batch.hash_text(i) for i in range(len(batch))] == [b.body_hash for b in want]
    assert batch.findings == [] and batch.ok.all()


def test_one_table_selects_exactly_that_tables_bodies(sample_ledger: Path) -> None:
    want = archived_bodies(sample_ledger / "session.db", "source_table = ?", ("model_calls",))
    with Ledger(sample_ledger) as ledger:
        batch = ledger.read_bodies("model_calls")
        with pytest.raises(ValueError, match="not a body table: 'no_such_table'"):
            ledger.read_bodies("no_such_table")  # a misspelt table is not "no bodies"
    assert set(batch.source_table.tolist()) == {"model_calls"}
    assert [bytes(m) for m in batch] == [b.data for b in want]


def test_keys_select_those_bodies_in_archive_order_and_an_unknown_key_is_a_key_error(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    keys = list(written)[::-3]  # out of order, every third
    with Ledger(directory) as ledger:
        batch = ledger.read_bodies(keys)
        assert _batch_map(batch) == {k: written[k] for k in keys}
        assert batch.rows.block_offset.tolist() == sorted(batch.rows.block_offset.tolist())
        with pytest.raises(KeyError):
            ledger.read_bodies([keys[0], ("ffffffffffff", "net_events", "request")])


def test_positions_select_rows_of_the_index_they_came_from(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    with Ledger(directory) as ledger:
        idx = ledger.index()
        positions = np.array([len(idx) - 1, 0, 5, 5])
        batch = ledger.read_bodies(positions, index=idx)
        assert [batch.key(i) for i in range(len(batch))] == [idx.key(0), idx.key(5), idx.key(len(idx) - 1)]
        assert _batch_map(batch) == {idx.key(i): written[idx.key(i)] for i in (0, 5, len(idx) - 1)}  # type: ignore[index]
        with pytest.raises(IndexError):
            ledger.read_bodies([len(idx)], index=idx)


def test_the_index_holds_every_row_as_arrays_matching_sql(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    with Ledger(directory) as ledger:
        idx = ledger.index()
    with sqlite3.connect(directory / "session.db") as conn:
        rows = conn.execute("SELECT id, event_id, source_table, direction, content_type, body_len, body_hash "
                            "FROM event_body_blobs ORDER BY block_offset, body_offset, id").fetchall()
    assert idx.id.tolist() == [r[0] for r in rows]
    assert idx.event_id.tolist() == [r[1] for r in rows]
    assert idx.source_table.tolist() == [r[2] for r in rows]
    assert idx.direction.tolist() == [r[3] for r in rows]
    assert idx.content_type.tolist() == [r[4] for r in rows]
    assert idx.body_len.tolist() == [r[5] for r in rows]
    assert [idx.hash_text(i) for i in range(len(idx))] == [r[6] for r in rows]
    assert idx.row_ok.all() and idx.hash_ok.all() and len(idx.blocks["block_offset"]) == 6


def test_a_body_is_a_zero_copy_read_only_view_of_the_one_buffer(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, _ = blocks_ledger
    with Ledger(directory) as ledger:
        batch = ledger.read_bodies()
    whole = memoryview(batch)
    assert whole.readonly and whole.nbytes == batch.nbytes == int(batch.lengths.sum())
    view = batch[3]
    assert view.readonly and view.obj is batch.buffer
    a = int(batch.offsets[3])
    assert bytes(view) == bytes(whole[a:a + len(view)])
    assert np.shares_memory(np.frombuffer(view, np.uint8), batch.buffer)
    with pytest.raises(ValueError):
        batch.buffer[0] = 1
    with pytest.raises((TypeError, BufferError)):
        memoryview(batch).cast("B")[0] = 1  # type: ignore[index]


def test_batches_hold_at_most_max_bytes_and_together_every_body_once(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    largest = max(len(v) for v in written.values())
    with Ledger(directory) as ledger:
        batches = list(ledger.body_batches(max_bytes=largest + 1000))
        with pytest.raises(ValueError, match="max_bytes"):
            ledger.read_bodies(max_bytes=largest)
        tiny = list(ledger.body_batches(max_bytes=10))
    assert len(batches) > 2
    assert all(b.nbytes <= largest + 1000 for b in batches)
    seen: dict[Key, bytes] = {}
    for b in batches:
        seen.update(_batch_map(b))
    assert seen == written and sum(len(b) for b in batches) == len(written)
    # A body larger than max_bytes is a batch of its own.
    assert [len(b) for b in tiny] == [1] * len(written)


def test_batches_are_cut_at_block_boundaries_when_a_batch_holds_one(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, _ = blocks_ledger
    with Ledger(directory) as ledger:
        batches = list(ledger.body_batches(max_bytes=3 << 20))
    firsts = [int(b.rows.block_offset[0]) for b in batches]
    lasts = [int(b.rows.block_offset[-1]) for b in batches]
    assert all(last < first for last, first in zip(lasts, firsts[1:]))


def test_a_damaged_block_raises_with_raise_and_is_left_out_with_skip_and_kept_empty_with_report(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    damaged = _block_offsets(directory / "session.db")[2]
    _flip_payload(directory, damaged)
    with Ledger(directory) as ledger:
        idx = ledger.index()
        hit = idx.block_offset == damaged
        with pytest.raises(errors.ArchiveError):
            ledger.read_bodies()
        skipped = ledger.read_bodies(errors="skip")
        reported = ledger.read_bodies(errors="report")
        _, faults = ledger.verify()
    assert len(skipped) == len(written) - int(hit.sum()) and skipped.ok.all()
    assert _batch_map(skipped) == {k: v for k, v in written.items() if k not in
                                   {idx.key(i) for i in np.flatnonzero(hit)}}
    assert len(reported) == len(written)
    assert reported.ok.tolist() == (~hit).tolist()
    assert all(len(reported[i]) == 0 for i in np.flatnonzero(hit))
    for batch in (skipped, reported):
        assert [(f.row_id, f.kind, f.message) for f in batch.findings] == [(f.row_id, f.kind, f.message) for f in faults]


def test_a_flipped_index_hash_is_a_body_hash_mismatch_that_skip_reports(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    key = list(written)[4]
    with sqlite3.connect(directory / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_hash = ? WHERE event_id = ? AND source_table = ? "
                     "AND direction = ?", ("blake3:" + "ab" * 32, *key))
    with Ledger(directory) as ledger:
        with pytest.raises(errors.BodyHashMismatch):
            ledger.read_bodies()
        batch = ledger.read_bodies(errors="skip")
        with pytest.raises(errors.BodyHashMismatch):
            ledger.read_body(*key)
    assert [(f.event_id, f.source_table, f.direction, f.kind) for f in batch.findings] == [(*key, "body_hash")]
    assert len(batch) == len(written) - 1 and key not in _batch_map(batch)


def test_a_row_whose_span_is_text_names_no_body_and_is_a_ledger_error_naming_session_db(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    key = list(written)[1]
    with sqlite3.connect(directory / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_offset = 'abc' WHERE event_id = ? AND source_table = ? "
                     "AND direction = ?", key)
    with Ledger(directory) as ledger:
        with pytest.raises(errors.LedgerError, match="non-integer span") as info:
            ledger.read_bodies()
        assert info.value.path == directory / "session.db"
        batch = ledger.read_bodies(errors="report")
    bad = [i for i in range(len(batch)) if not batch.ok[i]]
    assert [batch.key(i) for i in bad] == [key]
    assert [f.kind for f in batch.findings] == ["index"]


def test_bodies_yields_the_good_bodies_before_the_damaged_one_then_raises(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, _ = blocks_ledger
    damaged = _block_offsets(directory / "session.db")[3]
    _flip_payload(directory, damaged)
    with Ledger(directory) as ledger:
        idx = ledger.index()
        before = int(np.searchsorted(idx.block_offset, damaged))
        got = []
        with pytest.raises(errors.ArchiveError):
            for record in ledger.bodies():
                got.append(record)
    assert len(got) == before > 0


def test_bodies_reads_batch_after_batch_into_one_buffer_and_yields_every_body_as_read(
        sample_ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = archived_bodies(sample_ledger / "session.db")
    made: list[int] = []
    real = bulk.new_buffer

    def counted(size: int) -> np.ndarray:
        made.append(size)
        return real(size)

    monkeypatch.setattr(bulk, "new_buffer", counted)
    monkeypatch.setattr(ledger_module, "_BODIES_BATCH_BYTES", 64 << 10)   # many batches
    with Ledger(sample_ledger) as ledger:
        got = [(r.event_id, r.source_table, r.direction, r.data) for r in ledger.bodies(threads=1)]
    assert got == [(b.event_id, b.source_table, b.direction, b.data) for b in want]
    batches = len(bulk.plan_batches(*_whole(sample_ledger), 64 << 10))
    # A buffer only when a batch is larger than every one before it: far fewer than batches.
    assert batches > 10 and len(made) < batches / 2 and made == sorted(made)


def _whole(directory: Path) -> tuple[object, np.ndarray]:
    with Ledger(directory) as ledger:
        idx = ledger.index()
    return idx, np.arange(len(idx), dtype=np.intp)


def test_an_unknown_errors_mode_is_refused(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    with Ledger(blocks_ledger[0]) as ledger, pytest.raises(ValueError, match="errors"):
        ledger.read_bodies(errors="ignore")  # type: ignore[arg-type]


def test_a_closed_ledger_refuses_bulk_reads(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    ledger = Ledger(blocks_ledger[0])
    ledger.close()
    for use in (ledger.index, ledger.read_bodies, lambda: next(ledger.body_batches())):
        with pytest.raises(errors.LedgerError, match="ledger is closed"):
            use()


def test_a_span_longer_than_any_block_is_out_of_range_in_every_mode(
        blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    directory, written = blocks_ledger
    key = list(written)[2]
    with sqlite3.connect(directory / "session.db") as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE event_body_blobs SET body_len = ? WHERE event_id = ? AND source_table = ? "
                     "AND direction = ?", (fmt.MAX_BLOCK_RAW_BYTES + 5, *key))
    with Ledger(directory) as ledger:
        with pytest.raises(errors.RefOutOfRange):
            ledger.read_bodies()
        batch = ledger.read_bodies(errors="report")
        skipped = ledger.read_bodies(errors="skip")
    assert [f.kind for f in batch.findings] == ["out_of_range"]
    assert len(skipped) == len(written) - 1 and key not in _batch_map(skipped)


def test_a_dropped_batch_frees_its_buffer_at_once(blocks_ledger: tuple[Path, dict[Key, bytes]]) -> None:
    import gc
    import weakref
    with Ledger(blocks_ledger[0]) as ledger:
        batch = ledger.read_bodies()
        view = batch[0]
        gone = weakref.ref(batch.buffer)
        del batch
        assert gone() is not None  # a view still holds the buffer
        del view
        gc.disable()
        try:
            assert gone() is None  # by reference counting alone: no cycle keeps it
        finally:
            gc.enable()


# The child's own peak (VmHWM, of its address space since exec): ru_maxrss would carry over
# the peak of the process it was forked from, a test run grown large.
_FORGED_READ = """
import re, sys
from capsem_core import Ledger
with Ledger(sys.argv[1]) as ledger:
    batch = ledger.read_bodies(errors="report")
    kinds = sorted({f.kind for f in batch.findings})
    peak = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
    print(len(batch.findings), sum(batch.ok), ",".join(kinds), peak)
"""


def test_rows_claiming_more_than_their_block_holds_never_size_the_buffer(tmp_path: Path) -> None:
    """A batch's buffer is sized from the rows' lengths before any byte is read: 64 forged
    rows each claiming 16 MiB of a block that holds a few KiB made read_bodies fault in a
    GiB. Each is a span outside its block, found before sizing: the buffer holds what the
    sound rows name."""
    directory = tmp_path / "forged"
    written = write_blocks_ledger(directory, count=4, size=4000)
    db = directory / "session.db"
    with sqlite3.connect(db) as conn:
        block, raw_len = conn.execute("SELECT block_offset, raw_len FROM body_blocks ORDER BY block_offset").fetchone()
        assert raw_len < 1 << 20
        big = fmt.MAX_BLOCK_RAW_BYTES
        conn.executemany(
            "INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
            "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
            "VALUES (?, 'http.request', 'net_events', 'payload', ?, ?, 0, ?, ?, 0, ?, '2026-11-30T12:00:00Z')",
            [(f"{0xf00000 + i:012x}", big, big, "blake3:" + "0" * 64, block, big) for i in range(64)])
    done = subprocess.run([sys.executable, "-c", _FORGED_READ, str(directory)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    findings, ok, kinds, peak_kib = done.stdout.split()
    assert (int(findings), int(ok), kinds) == (64, len(written), "out_of_range")
    assert int(peak_kib) < 400 << 10, f"peak RSS {int(peak_kib) >> 10} MiB for {len(written)} small bodies"


def test_a_block_whose_listed_raw_len_is_past_the_format_lets_no_row_size_the_buffer(tmp_path: Path) -> None:
    """The block's raw_len bounds its rows, and it is read from disk too: a block listed as
    2^40 bytes long, with rows claiming 2^38 each, would size a buffer of terabytes. A block
    longer than the format's largest lets its rows claim nothing; the rest read as before."""
    directory = tmp_path / "forged"
    write_blocks_ledger(directory, count=4, size=4000)
    db = directory / "session.db"
    with sqlite3.connect(db) as conn:
        block = conn.execute("SELECT block_offset FROM body_blocks ORDER BY block_offset").fetchone()[0]
        in_block = conn.execute("SELECT COUNT(*) FROM event_body_blobs WHERE block_offset = ?", (block,)).fetchone()[0]
        total = conn.execute("SELECT COUNT(*) FROM event_body_blobs").fetchone()[0]
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE body_blocks SET raw_len = ? WHERE block_offset = ?", (1 << 40, block))
        conn.executemany(
            "INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
            "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
            "VALUES (?, 'http.request', 'net_events', 'payload', ?, ?, 0, ?, ?, 0, ?, '2026-11-30T12:00:00Z')",
            [(f"{0xf10000 + i:012x}", 1 << 38, 1 << 38, "blake3:" + "0" * 64, block, 1 << 38) for i in range(4)])
    done = subprocess.run([sys.executable, "-c", _FORGED_READ, str(directory)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    findings, ok, kinds, peak_kib = done.stdout.split()
    assert (int(findings), int(ok), kinds) == (in_block + 4, total - in_block, "out_of_range")
    assert int(peak_kib) < 400 << 10, f"peak RSS {int(peak_kib) >> 10} MiB"


@pytest.mark.parametrize("max_bytes", [float("nan"), float("inf"), 1.5, True, "64", -1])
def test_a_max_bytes_that_is_no_bound_is_refused_never_ignored(
        blocks_ledger: tuple[Path, dict[Key, bytes]], max_bytes: object) -> None:
    directory, _ = blocks_ledger
    with Ledger(directory) as ledger:
        # NaN compared false with every total: read_bodies read everything, and body_batches
        # put the whole selection in one batch, whatever the caller meant to bound.
        with pytest.raises((TypeError, ValueError), match="max_bytes"):
            ledger.read_bodies(max_bytes=max_bytes)  # type: ignore[arg-type]
        with pytest.raises((TypeError, ValueError), match="max_bytes"):
            next(ledger.body_batches(max_bytes=max_bytes))  # type: ignore[arg-type]
        assert ledger.read_bodies(max_bytes=10**12).nbytes == sum(b.nbytes for b in ledger.body_batches())
