"""The test session's environment: verification records (``check --incremental``) go to a
temporary directory of this run, never the user's cache, in this process and in every
command the tests start."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_RECORDS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    directory = tempfile.mkdtemp(prefix="capsem-core-records-")
    _RECORDS.append(directory)
    os.environ["CAPSEM_CORE_VERIFIED_DIR"] = directory


def pytest_unconfigure(config: pytest.Config) -> None:
    for directory in _RECORDS:
        shutil.rmtree(directory, ignore_errors=True)
