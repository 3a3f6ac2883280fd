"""sample's options belong to one mode: ``--sessions`` lays out a ``--home``, ``--raw-bytes`` and
``--progress`` write one ledger. Given in the other mode, such an option is a usage error
(exit 2, one line naming it) before anything is written, rather than silently ignored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capsem_core import cli


@pytest.mark.parametrize("argv, option", [
    (["--sessions", "5"], "--sessions"),
    (["--home", "--raw-bytes", "1M"], "--raw-bytes"),
    (["--home", "--progress"], "--progress"),
])
def test_an_option_of_the_other_mode_is_a_usage_error_naming_it_and_nothing_is_written(
        tmp_path: Path, argv: list[str], option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["sample", str(tmp_path / "out"), "--bodies", "10", *argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert err.startswith("usage: capsem-ledger sample")
    last = err.splitlines()[-1]
    assert last.startswith("capsem-ledger sample: error: ") and option in last
    assert os.listdir(tmp_path) == []


def test_a_home_without_sessions_has_the_default_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capsem_core.cli.sample import HOME_SESSIONS

    assert cli.main(["sample", str(tmp_path / "h"), "--home", "--bodies", "40"]) == 0
    assert f"with {HOME_SESSIONS} sessions" in capsys.readouterr().out
