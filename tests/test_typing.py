"""The package type-checks under ``mypy --strict`` (its stubs for the native modules included)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install '.[test]')")
def test_the_package_passes_mypy_strict() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "src/capsem_core"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
