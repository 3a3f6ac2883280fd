"""Archive order applied in place (index_order.pxi): the rows numpy's take gives, without a
sorted copy beside the column, and nothing moved when the order is not a permutation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsem_core._native import _index


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), width=st.sampled_from([0, 1, 8, 32]), seed=st.integers(0, 2**32 - 1))
def test_rows_end_where_numpys_take_puts_them(n: int, width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = (n,) if width == 0 else (n, width)
    column = rng.integers(0, 256, shape).astype(np.uint8 if width else np.int64)
    order = rng.permutation(n)
    want = np.take(column, order, axis=0)
    _index.permute_in_place(column, order)
    assert np.array_equal(column, want)


def test_a_bool_column_and_a_million_rows_in_near_archive_order() -> None:
    rng = np.random.default_rng(3)
    order = np.arange(1_000_000)
    moved = rng.choice(len(order), 9000, replace=False)
    order[np.sort(moved)] = moved   # a few rows out of place, as rows reusing a span are
    flags = rng.integers(0, 2, len(order)).astype(bool)
    want = flags[order]
    _index.permute_in_place(flags, order)
    assert np.array_equal(flags, want)


@pytest.mark.parametrize("order", [[0, 0, 1], [0, 1, 3], [-1, 0, 1], [2, 1]])
def test_an_order_that_is_not_a_permutation_moves_nothing(order: list[int]) -> None:
    column = np.array([10, 20, 30], np.int64)
    with pytest.raises(ValueError, match="every row once"):
        _index.permute_in_place(column, np.array(order, np.int64))
    assert column.tolist() == [10, 20, 30]


def test_a_read_only_or_strided_array_is_refused() -> None:
    frozen = np.arange(4)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="C-contiguous writeable"):
        _index.permute_in_place(frozen, np.arange(4))
    with pytest.raises(ValueError, match="C-contiguous writeable"):
        _index.permute_in_place(np.arange(8)[::2], np.arange(4))


def test_archive_order_sorts_the_columns_it_is_given_in_place() -> None:
    blk = np.array([32, 16, 16], np.int64)
    rows = {"block_offset": blk, "body_offset": np.array([0, 5, 1], np.int64), "id": np.array([1, 2, 3], np.int64),
            "digest": np.arange(96, dtype=np.uint8).reshape(3, 32)}
    digest = rows["digest"]
    out = _index.archive_order(rows)
    assert out["id"].tolist() == [3, 2, 1] and out["block_offset"] is blk
    assert np.array_equal(out["digest"][0], np.arange(64, 96)) and out["digest"] is digest
