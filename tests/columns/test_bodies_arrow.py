"""A BodyBatch as Arrow: its keys and its bodies as one record batch whose data column is the
batch's own buffer (no body copied), kept alive by Arrow, end to end even after damage."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import polars
import pyarrow as pa
import pytest

from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from tests.columns.ledgers import poke


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bodies") / "ledger"
    write_sample_ledger(directory, seed=4, bodies=400)
    return directory


def test_a_batch_is_a_record_batch_of_its_keys_and_its_own_bytes(sample: Path) -> None:
    with Ledger(sample) as ledger:
        batch = ledger.read_bodies()
        table = pa.table(batch)
    assert table.schema.names == ["id", "event_id", "source_table", "direction", "content_type", "original_bytes",
                                  "truncated", "digest", "ok", "data"]
    assert table.schema.field("data").type == pa.large_binary()
    assert table.schema.field("digest").type == pa.binary(32)
    assert table.num_rows == len(batch)
    assert table.column("data").to_pylist() == [bytes(b) for b in batch]
    assert table.column("event_id").to_pylist() == batch.event_id.tolist()
    assert table.column("content_type").to_pylist() == batch.content_type.tolist()
    assert table.column("id").to_pylist() == batch.id.tolist()
    assert table.column("digest").to_pylist() == [bytes(d) for d in batch.digest]
    assert table.column("truncated").to_pylist() == batch.truncated.tolist()
    # The data buffer is the batch's: no body was copied.
    data = table.column("data").chunk(0)
    assert data.buffers()[2].address == batch.buffer.ctypes.data
    table.validate(full=True)


def test_the_arrays_keep_the_batch_alive_until_arrow_lets_go(sample: Path) -> None:
    with Ledger(sample) as ledger:
        batch = ledger.read_bodies("net_events")
        first = bytes(batch[0])
        gone = weakref.ref(batch)
        record = pa.record_batch(batch)
        del batch
        gc.collect()
        assert gone() is not None
        assert record.column(9)[0].as_py() == first
        del record
        gc.collect()
        assert gone() is None


def test_polars_reads_a_batch_directly(sample: Path) -> None:
    with Ledger(sample) as ledger:
        batch = ledger.read_bodies("model_calls")
        frame = polars.DataFrame(batch)
    assert frame.height == len(batch) and frame["data"].to_list() == [bytes(b) for b in batch]


@pytest.mark.parametrize("errors", ["skip", "report"])
def test_a_damaged_batch_still_lies_end_to_end_for_arrow(sample: Path, tmp_path: Path, errors: str) -> None:
    import shutil

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("session.db", "session.bodies"):
        shutil.copy(sample / name, copy / name)
    poke(copy / "session.db", "UPDATE event_body_blobs SET body_hash = 'blake3:' || printf('%064d', 0) "
                              "WHERE id IN (3, 40, 41)")
    with Ledger(copy) as ledger:
        batch = ledger.read_bodies(errors=errors)  # type: ignore[arg-type]
        whole = ledger.read_bodies(errors="report")
    assert len(batch.findings) == 3
    ends = batch.offsets + batch.lengths
    assert batch.offsets[0] == 0 and (batch.offsets[1:] == ends[:-1]).all() and ends[-1] == batch.nbytes
    table = pa.table(batch)
    assert table.column("data").to_pylist() == [bytes(b) for b in batch]
    assert table.column("ok").to_pylist() == batch.ok.tolist()
    good = {int(i): bytes(b) for i, b, ok in zip(whole.id, whole, whole.ok) if ok}
    assert {int(i): d for i, d, ok in zip(batch.id, table.column("data").to_pylist(), batch.ok) if ok} == good


def test_a_key_holding_text_that_is_not_utf8_is_exported_as_binary(sample: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("session.db", "session.bodies"):
        shutil.copy(sample / name, copy / name)
    poke(copy / "session.db", "UPDATE event_body_blobs SET content_type = CAST(x'ff' AS TEXT) WHERE id = 2")
    with Ledger(copy) as ledger:
        table = pa.table(ledger.read_bodies())
    assert table.schema.field("content_type").type == pa.large_binary()
    assert b"\xff" in table.column("content_type").to_pylist()
    assert table.schema.field("event_id").type == pa.large_string()
