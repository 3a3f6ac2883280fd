"""scripts/setup: a second run on an unchanged checkout installs nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAMP = ROOT / ".venv" / ".capsem-core-setup"


@pytest.mark.skipif(not STAMP.exists(), reason="not installed by scripts/setup (no .venv stamp)")
def test_setup_on_an_unchanged_checkout_returns_at_once_without_reinstalling() -> None:
    check = subprocess.run([str(ROOT / "scripts" / "setup"), "--check"], cwd=ROOT, capture_output=True)
    if check.returncode != 0:
        pytest.skip("the build inputs changed since the last set-up: `make test` runs it first")
    before = STAMP.stat().st_mtime_ns
    done = subprocess.run([str(ROOT / "scripts" / "setup")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PIP_NO_INDEX": "1"})
    assert done.returncode == 0, done.stderr
    # A reinstall rewrites the stamp; pip with no index would also fail loudly.
    assert STAMP.stat().st_mtime_ns == before
    assert "installing" not in done.stderr
