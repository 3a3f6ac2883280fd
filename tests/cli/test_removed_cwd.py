"""A command run in a directory that was removed, given a relative path: one line saying so
(it said only "No such file or directory", naming nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core.sample import write_sample_home


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cwd") / "home"
    write_sample_home(path, seed=5, sessions=3, bodies=30)
    return path


@pytest.mark.parametrize("args", [("check", "--db", "rel/ledger"), ("export", "co-work1", "outdir"),
                                  ("sample", "newdir", "--bodies", "1")], ids=" ".join)
def test_a_relative_path_in_a_removed_current_directory_is_said_in_one_line(home: Path, tmp_path: Path,
                                                                             args: tuple[str, ...]) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    env = {**os.environ, "CAPSEM_HOME": str(home), "CAPSEM_RUN_DIR": str(home / "run")}
    # The shell enters the directory and removes it; capsem-ledger starts there.
    done = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
                           sys.executable, "-m", "capsem_core", *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr == f"capsem-ledger {args[0]}: the current directory was removed: a relative path names nothing\n"
