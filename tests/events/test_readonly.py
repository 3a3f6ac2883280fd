"""Reading events never needs write access: the events command reads a ledger in a directory
its user cannot write, or on a read-only mount, in full, and nothing there changes
(the media and helpers of tests/test_readonly_media.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_readonly_media import (  # noqa: F401  (base, nobody, nobody_prefix: fixtures)
    MEDIA, _cli, _run, base, copy_alone, nobody, nobody_prefix, on_medium, snapshot, write_sample,
)


@pytest.mark.parametrize("kind", MEDIA)
def test_events_read_in_full_from_storage_the_reader_cannot_write(base: Path, kind: str, nobody) -> None:  # type: ignore[no-untyped-def]
    write_sample(base / "sample", bodies=120)
    want = _run(_cli("events", "--db", str(base / "sample"), "--jsonl"))
    assert want.returncode == 0 and want.stdout.count("\n") > 100, want.stderr
    evidence = copy_alone(base / "sample", base / "evidence")
    with on_medium(kind, evidence, nobody) as (d, run):
        before = snapshot(d)
        got = run(_cli("events", "--db", str(d), "--jsonl"))
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout and got.stderr == want.stderr  # the same cursor, too
        assert snapshot(d) == before
        assert sorted(os.listdir(d)) == ["session.bodies", "session.db"]
