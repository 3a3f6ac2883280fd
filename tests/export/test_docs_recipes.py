"""docs/export.md's reading recipes (warcio, FastWARC) run as written against a real export,
so the documented way to read the file is one that works."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from capsem_core.ledger import Ledger
from tests.export.conftest import write_upstream_ledger

DOC = Path(__file__).resolve().parents[2] / "docs" / "export.md"


def _recipes() -> list[str]:
    section = DOC.read_text().split("## Reading the file", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_doc_has_a_warcio_and_a_fastwarc_recipe() -> None:
    recipes = _recipes()
    assert len(recipes) == 2 and "warcio" in recipes[0] and "fastwarc" in recipes[1]


@pytest.mark.parametrize("which", [0, 1])
def test_each_reading_recipe_runs_on_a_real_export(tmp_path: Path, which: int) -> None:
    write_upstream_ledger(tmp_path / "session")
    with Ledger(tmp_path / "session") as ledger:
        summary = ledger.export_warc(tmp_path / "session.warc.gz")
    namespace: dict[str, object] = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(_recipes()[which], "docs/export.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    if which == 0:
        assert namespace["fields"]["capsem-records"] == str(summary.records)  # type: ignore[index]
        assert str(namespace["record_id"]).startswith("<urn:capsem:session:")
    else:
        assert str(namespace["uri"]).startswith("capsem://") or str(namespace["uri"]).startswith("https://")
