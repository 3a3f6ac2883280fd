"""TextColumn: values on demand, subsets by numpy gathers, equality masks, and hostile
values (NULL, non-UTF-8 bytes from a BLOB, integers) from a real index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from capsem_core.bodies import TextColumn
from capsem_core.ledger import Ledger

from tests.bodies.conftest import write_blocks_ledger


def test_values_subsets_and_masks_agree_with_plain_lists() -> None:
    values = ["net_events", None, "", "model_calls", "net_events", "naïve \u202e", "x" * 300]
    col = TextColumn.from_strings(values)
    assert len(col) == len(values) and col.tolist() == values
    assert col[-1] == values[-1] and col[1] is None
    picks = np.array([6, 0, 0, 3, 1])
    assert col[picks].tolist() == [values[i] for i in picks]
    assert col[2:5].tolist() == values[2:5]
    assert col[np.array([True, False] * 3 + [True])].tolist() == values[::2]
    assert col.equals("net_events").tolist() == [v == "net_events" for v in values]
    assert col.equals("").tolist() == [v == "" for v in values]
    assert (col == "naïve \u202e").tolist() == [v == "naïve \u202e" for v in values]
    with pytest.raises(IndexError):
        col[len(values)]
    with pytest.raises(IndexError):
        col.take(np.array([0, 99]))


def test_hostile_key_values_come_back_as_the_index_holds_them(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path, count=4, size=2000)
    with sqlite3.connect(tmp_path / "session.db") as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        ids = [r[0] for r in conn.execute("SELECT id FROM event_body_blobs ORDER BY id")]
        conn.execute("UPDATE event_body_blobs SET event_id = ? WHERE id = ?", (b"\xff\xfe../\x1b[31m", ids[0]))
        conn.execute("UPDATE event_body_blobs SET content_type = NULL WHERE id = ?", (ids[1],))
        conn.execute("UPDATE event_body_blobs SET event_id = 12345 WHERE id = ?", (ids[2],))
    with Ledger(tmp_path) as ledger:
        idx = ledger.index()
    by_id = {int(idx.id[i]): i for i in range(len(idx))}
    assert idx.event_id[by_id[ids[0]]].encode("utf-8", "surrogateescape") == b"\xff\xfe../\x1b[31m"
    assert idx.content_type[by_id[ids[1]]] is None
    assert idx.event_id[by_id[ids[2]]] == "12345"
