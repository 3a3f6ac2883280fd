"""The README's Python example runs as written, so the documented API is the real one."""

from __future__ import annotations

import os
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_python_example_writes_checks_and_reads_its_body_back(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace: dict[str, object] = {}
        exec(compile(blocks[0], "README.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    assert namespace["data"] == b'{"model": "claude"}'
    assert namespace["report"].sound  # type: ignore[attr-defined]
    assert len(namespace["batch"]) == 1  # type: ignore[arg-type]
    assert namespace["page"].events[0].event_id == "0123456789ab"  # type: ignore[attr-defined]
    assert (tmp_path / "backup" / "abc" / "session.bodies").is_file()
