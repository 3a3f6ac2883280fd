"""The per-ledger task's options and a large ledger's block ranges."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from capsem_core.fleet import UnsupportedOption
from capsem_core.fleet.task import block_ranges, check_options, splittable


def test_block_ranges_cover_every_offset_exactly_once_the_last_open_ended() -> None:
    ranges = block_ranges(10 * 1024 + 1, 1024)
    assert len(ranges) == 11 and ranges[0] == (0, 1024) and ranges[-1] == (10 * 1024, None)
    assert all(hi == ranges[i + 1][0] for i, (_, hi) in enumerate(ranges[:-1]))
    assert block_ranges(0, 1024) == [(0, None)]
    with pytest.raises(ValueError):
        block_ranges(10, 0)


def test_options_check_ledger_does_not_take_are_refused_naming_the_flag() -> None:
    assert check_options(rows=5, verify_bodies=True, incremental=False, subset=None) == {"rows": 5,
                                                                                         "verify_bodies": True}
    with pytest.raises(UnsupportedOption, match="--no-such-option is not supported by this build's check"):
        check_options(no_such_option=True)


@dataclass(frozen=True)
class _Options:
    whole: bool


def test_only_a_verify_of_every_block_in_full_is_split_into_ranges() -> None:
    assert splittable({"rows": 5, "verify_bodies": True})
    assert splittable({"verify_bodies": True, "options": _Options(whole=True)})
    assert not splittable({"verify_bodies": True, "options": _Options(whole=False)})
    assert not splittable({"verify_bodies": True, "incremental": True})
