"""Fixtures the fleet tests share: ``check`` run in this process against a home."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from capsem_core import cli


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """capsem-ledger check in this process (its check processes are forked as in a real run)."""
    def run(home: Path, *args: str) -> Done:
        monkeypatch.setenv("CAPSEM_HOME", str(home))
        monkeypatch.setenv("CAPSEM_RUN_DIR", str(home / "run"))
        monkeypatch.setenv("NO_COLOR", "1")
        try:
            code = cli.main(["check", *args])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Done(code, out, err)
    return run
