"""check's usage errors come before any output: options that contradict each other are
refused before the recent sessions' table is printed, so stdout holds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsem_core import cli
from capsem_core.sample import write_sample_home


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("usage") / "home"
    write_sample_home(path, seed=5, sessions=3, bodies=30)
    return path


@pytest.mark.parametrize("argv, words", [
    (["--incremental"], "give --verify-bodies too"),
    (["--max-age", "7d"], "give --incremental too"),
    (["--subset-seed", "3"], "give --subset too"),
    (["--verify-bodies", "--subset", "5/3"], "the slice must lie in 1..3"),
    (["--verify-bodies", "--subset", "0/0"], "the number of slices must lie in"),
])
def test_a_check_of_a_session_with_options_that_contradict_prints_nothing_before_its_usage_error(
        home: Path, argv: list[str], words: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(home / "run"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", "co-work1", *argv])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and words in err and err.startswith("usage: capsem-ledger check")
    assert out == ""   # (the recent sessions were printed first, then the usage error)
