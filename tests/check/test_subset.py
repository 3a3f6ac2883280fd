"""check --verify-bodies --subset n/t | x%: which blocks a partial verify reads, and that t
slices cover every block exactly once.

Coverage is shown by behaviour: one damaged block is found by exactly the slice holding it,
and by no other.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.check.test_check import run_cli, sql, write_ledger
from tests.check.test_check_archive import flip
from tests.check.test_incremental import append

from capsem_core.check import check_ledger
from capsem_core.check import record as _record
from capsem_core.check.incremental import VerifyOptions
from capsem_core.check.subset import MAX_SLICES, Subset
from capsem_core.ledger import Ledger


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = write_ledger(tmp_path_factory.mktemp("subset") / "sess")
    append(db.parent, 9)   # eleven blocks in all
    return db


@pytest.fixture(autouse=True)
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "verified"
    monkeypatch.setenv(_record.RECORD_DIR_ENV, str(directory))
    return directory


def block_rows(db: Path) -> list[tuple[int, int]]:
    return [tuple(r) for r in sql(db, "SELECT block_offset, disk_len FROM body_blocks ORDER BY block_offset")]


def subset_check(db: Path, text: str, seed: int | None = None, **kw: object):
    return check_ledger(db, verify_bodies=True, options=VerifyOptions(subset=Subset.parse(text, seed), **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("t", [1, 2, 3, 4, 5, 11, 12])
def test_t_slices_cover_every_block_exactly_once(t: int) -> None:
    for blocks in (0, 1, 7, 11, 100, 1001):
        masks = [Subset.parse(f"{n}/{t}").select(blocks) for n in range(1, t + 1)]
        assert np.array_equal(np.sum(masks, axis=0), np.ones(blocks))
        sizes = [int(m.sum()) for m in masks]
        assert max(sizes, default=0) - min(sizes, default=0) <= 1


def test_a_slice_keeps_its_blocks_when_the_ledger_grows() -> None:
    for n in range(1, 5):
        s = Subset.parse(f"{n}/4")
        assert np.array_equal(s.select(37)[:30], s.select(30))


def test_the_slices_of_a_real_ledger_add_up_to_the_whole(ledger: Path) -> None:
    n_blocks = len(block_rows(ledger))
    covs = [subset_check(ledger, f"{n}/4").coverage for n in range(1, 5)]
    assert sum(c.verified.blocks for c in covs) == n_blocks
    bodies = check_ledger(ledger).checks["body_archive"].counts["bodies"]
    assert sum(c.verified.bodies for c in covs) == bodies
    assert sum(c.verified.bytes for c in covs) == sum(d for _, d in block_rows(ledger))
    for c in covs:
        assert c.verified.blocks + c.skipped.blocks == n_blocks
        assert c.verified.bodies + c.skipped.bodies == bodies


def test_a_damaged_block_is_found_by_exactly_the_slice_that_holds_it(ledger: Path, tmp_path: Path) -> None:
    with Ledger(ledger.parent) as lg:
        copy = lg.copy_to(tmp_path / "copy")
    copy.close()
    db = tmp_path / "copy" / "session.db"
    off, disk = block_rows(db)[6]   # block k = 6 is in slice 6 mod 3 + 1 = 1 of 3
    flip(db.with_suffix(".bodies"), off + disk // 2)
    verdicts = [subset_check(db, f"{n}/3").sound for n in range(1, 4)]
    assert verdicts == [False, True, True]


def test_a_random_part_is_repeatable_with_its_seed_and_reports_it(ledger: Path) -> None:
    a = Subset.parse("30%", seed=7)
    assert np.array_equal(a.select(1000), Subset.parse("30%", seed=7).select(1000))
    assert not np.array_equal(a.select(1000), Subset.parse("30%", seed=8).select(1000))
    assert int(a.select(1000).sum()) == 300
    assert int(Subset.parse("0.01%", seed=1).select(11).sum()) == 1   # at least one block
    assert Subset.parse("100%").select(11).all()
    drawn = Subset.parse("10%")
    assert drawn.seed is not None and f"seed {drawn.seed}" in drawn.describe()
    report = subset_check(ledger, "20%", seed=3)
    assert report.sound and report.coverage.verified.blocks == 3   # ceil(11 * 0.2)


@pytest.mark.parametrize("text, words", [
    ("0/4", "the slice must lie in 1..4"), ("5/4", "the slice must lie in 1..4"),
    ("1/0", "the number of slices must lie in"), (f"1/{MAX_SLICES + 1}", "the number of slices must lie in"),
    ("0%", "above 0 and at most 100"), ("101%", "above 0 and at most 100"), ("half", "neither n/t"),
    ("1/4/2", "neither n/t"), ("-5%", "neither n/t"), ("", "neither n/t"),
])
def test_a_subset_that_is_not_one_is_refused_saying_why(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        Subset.parse(text)


def test_subset_with_incremental_proves_only_its_own_slice(ledger: Path, tmp_path: Path) -> None:
    with Ledger(ledger.parent) as lg:
        lg.copy_to(tmp_path / "copy").close()
    db = tmp_path / "copy" / "session.db"
    first = subset_check(db, "1/2", incremental=True)
    assert first.coverage.verified.blocks == 6 and first.coverage.skipped.blocks == 5
    second = subset_check(db, "2/2", incremental=True)
    assert second.coverage.verified.blocks == 5 and second.coverage.unchanged.blocks == 0
    # Both halves are now recorded: a whole incremental run reads nothing back.
    whole = check_ledger(db, verify_bodies=True, options=VerifyOptions(incremental=True))
    assert whole.coverage.unchanged.blocks == 11 and whole.coverage.verified.blocks == 0


def test_the_report_says_what_a_subset_covered_in_text_and_json(ledger: Path, capsys) -> None:
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--subset", "2/4")
    assert code == 0
    assert "verified fully: " in out and "skipped, outside slice 2 of 4: " in out
    code, out, _ = run_cli(capsys, "--db", str(ledger), "--verify-bodies", "--subset", "50%", "--subset-seed", "9",
                           "--json")
    cov = json.loads(out)["coverage"]
    assert cov["subset"] == {"percent": 50.0, "seed": 9}
    assert cov["verified"]["blocks"] == 6 and cov["skipped"]["blocks"] == 5
    assert cov["incremental"] is False and cov["record"]["status"] == "not used"


def test_ledger_verify_takes_a_subset(ledger: Path) -> None:
    with Ledger(ledger.parent) as lg:
        result = lg.verify(subset="1/11")
        assert result.faults == [] and result.coverage is not None
        assert result.coverage.verified.blocks == 1 and result.coverage.skipped.blocks == 10
        with pytest.raises(ValueError, match="neither n/t"):
            lg.verify(subset="all")


@pytest.mark.parametrize("argv, words", [
    (["--subset", "1/4"], "give --verify-bodies too"),
    (["--verify-bodies", "--subset", "9/4"], "the slice must lie in 1..4"),
    (["--verify-bodies", "--subset-seed", "3"], "give --subset too"),
])
def test_subset_options_out_of_place_are_usage_errors(ledger: Path, capsys, argv: list[str], words: str) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, "--db", str(ledger), *argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and words in err
