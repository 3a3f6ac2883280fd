"""oracles/verify_ahead.py, the bench's bound of a streamed verification: the check it changes
(in a child process, as the bench runs it) verifies from the saved index as the archive walk
returns, with session.bodies read ahead first or not, and reads as the check itself does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.check.test_check import write_ledger
from tests.check.test_check_archive import blocks, flip, segments

from capsem_core.format import SEGMENT_HEADER_BYTES
from oracles import verify_ahead
from oracles.peak_memory import STATUS, measured

pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="the measured child needs /proc/self/status")


def check(db: Path, saved: Path | None = None, bodies_first: bool = False) -> tuple[int, dict[str, Any]]:
    env = {verify_ahead.ENV: str(saved)} if saved is not None else None
    if env is not None and bodies_first:
        env[verify_ahead.BODIES_FIRST] = "1"
    got = measured(["check", "--db", str(db), "--verify-bodies", "--json"], env=env,
                   preload=("oracles.verify_ahead",), timeout=120)
    return got.status, json.loads(got.stdout)


def saved_index(db: Path, tmp_path: Path) -> Path:
    saved = tmp_path / "index.npz"
    verify_ahead.save_index(db, saved)
    return saved


def test_a_sound_ledger_reads_the_same_with_the_verification_from_the_walk(tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "sess")
    plain, ahead = check(db), check(db, saved_index(db, tmp_path))
    assert plain[0] == ahead[0] == 0
    assert ahead[1]["checks"]["verify_bodies"] == plain[1]["checks"]["verify_bodies"]
    assert ahead[1]["checks"]["verify_bodies"]["counts"]["verified"] == 12


def test_the_verification_comes_from_the_saved_index(tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "sess")
    saved = saved_index(db, tmp_path)
    with np.load(saved) as data:
        arrays = {k: data[k].copy() for k in data.files}
    arrays["row_digest"][0] ^= 0xFF   # a digest no body hashes to, only in the saved copy
    np.savez(saved, **arrays)
    status, report = check(db, saved)
    assert status != 0
    assert [f["code"] for f in report["checks"]["verify_bodies"]["findings"]] == ["body_hash"]
    assert check(db)[0] == 0


def test_an_index_of_another_ledger_is_refused(tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "sess")
    other = write_ledger(tmp_path / "other", second_block=False)
    with pytest.raises(RuntimeError, match="not this ledger's"):
        check(db, saved_index(other, tmp_path))


def test_a_damaged_segment_reads_the_same_either_way(tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "sess")
    saved = saved_index(db, tmp_path)
    block, _raw, disk = blocks(db)[0]
    at, _raw_len, comp_len = segments(db.with_suffix(".bodies"), block, disk)[1]
    flip(db.with_suffix(".bodies"), at + SEGMENT_HEADER_BYTES + comp_len // 2)   # inside the second segment's payload
    plain, ahead = check(db), check(db, saved)
    assert plain[0] == ahead[0] != 0
    assert ahead[1]["checks"]["verify_bodies"] == plain[1]["checks"]["verify_bodies"]
    assert ahead[1]["checks"]["verify_bodies"]["findings"]


def test_reading_session_bodies_first_changes_no_verdict(tmp_path: Path) -> None:
    db = write_ledger(tmp_path / "sess")
    saved = saved_index(db, tmp_path)
    sound = check(db, saved, bodies_first=True)
    assert sound[0] == 0 and sound[1]["checks"]["verify_bodies"] == check(db)[1]["checks"]["verify_bodies"]
    block, _raw, disk = blocks(db)[0]
    at, _raw_len, comp_len = segments(db.with_suffix(".bodies"), block, disk)[1]
    flip(db.with_suffix(".bodies"), at + SEGMENT_HEADER_BYTES + comp_len // 2)
    plain, first = check(db), check(db, saved, bodies_first=True)
    assert plain[0] == first[0] != 0
    assert first[1]["checks"]["verify_bodies"] == plain[1]["checks"]["verify_bodies"]
