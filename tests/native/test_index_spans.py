"""The body rows' spans against body_blocks in one native pass (index_spans.pxi): the counts
numpy's masks over the whole index give, in any row order, for any values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsem_core._native import _index

MAX_RAW = 1 << 24
_VALUE = st.one_of(st.integers(-3, 40), st.sampled_from([MAX_RAW, MAX_RAW + 1, -(1 << 63), (1 << 63) - 1]))


def _by_numpy(k_off, k_raw, b_blk, b_off, b_len) -> tuple[int, int, int]:
    slot = np.searchsorted(k_off, b_blk)
    inside = slot < len(k_off)
    recorded = np.zeros(len(b_blk), dtype=bool)
    recorded[inside] = k_off[slot[inside]] == b_blk[inside]
    in_bounds = (b_off >= 0) & (b_off <= MAX_RAW) & (b_len >= 0) & (b_len <= MAX_RAW)
    fits = recorded & in_bounds
    overruns = int(np.count_nonzero(b_off[fits] + b_len[fits] > k_raw[slot[fits]]))
    return int(len(b_blk) - recorded.sum()), int(len(b_blk) - in_bounds.sum()), overruns


@settings(max_examples=300, deadline=None)
@given(blocks=st.lists(st.tuples(st.integers(0, 60), _VALUE), max_size=8),
       bodies=st.lists(st.tuples(st.integers(-2, 62), _VALUE, _VALUE), max_size=40), archive_order=st.booleans())
def test_the_counts_are_numpys_for_any_rows(blocks, bodies, archive_order) -> None:
    blocks.sort()
    if archive_order:
        bodies.sort()
    k_off, k_raw = (np.array(c, np.int64).reshape(-1) for c in zip(*blocks)) if blocks else (np.zeros(0, np.int64),) * 2
    cols = [np.array(c, np.int64).reshape(-1) for c in zip(*bodies)] if bodies else [np.zeros(0, np.int64)] * 3
    assert _index.spans_against_blocks(k_off, k_raw, *cols, MAX_RAW) == _by_numpy(k_off, k_raw, *cols)


def test_a_million_rows_in_archive_order_are_counted_exactly() -> None:
    rng = np.random.default_rng(7)
    k_off = np.arange(16, 16 + 400 * 4096, 4096, dtype=np.int64)
    k_raw = rng.integers(1, 1 << 20, len(k_off))
    b_blk = np.sort(rng.choice(np.append(k_off, [3, 99999999]), 1_000_000))
    b_off = rng.integers(-1, 1 << 20, len(b_blk))
    b_len = rng.integers(0, 1 << 12, len(b_blk))
    assert _index.spans_against_blocks(k_off, k_raw, b_blk, b_off, b_len, MAX_RAW) == \
        _by_numpy(k_off, k_raw, b_blk, b_off, b_len)


def test_columns_of_different_lengths_are_refused() -> None:
    one, two = np.zeros(1, np.int64), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="one length"):
        _index.spans_against_blocks(one, two, one, one, one, MAX_RAW)
    with pytest.raises(ValueError, match="one length"):
        _index.spans_against_blocks(one, one, one, two, one, MAX_RAW)
