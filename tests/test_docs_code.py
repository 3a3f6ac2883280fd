"""Every Python example of the README and of docs/ runs as written, so the documented API is
the one the package has.

Each document's blocks run in order, each in a fresh namespace, in a directory of their own
holding a sample ledger at ``run/sessions/abc`` (with one known body, ``0123456789ab``'s
net_events request) beside ``CAPSEM_HOME`` pointing at a small sample home. The follow recipe
runs until SIGTERM, so it runs as a process and is stopped once it has caught up.
performance.md is measured by ``make bench``, not run here."""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import Body, Ledger, LedgerWriter
from capsem_core.sample import write_sample_home, write_sample_ledger
from tests.fleet.helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md")
                                          if p.name not in ("performance.md", "bench-results.md"))
KNOWN = ("0123456789ab", "net_events", "request")
KNOWN_BODY = b'{"model": "claude-sonnet-4"}'
# The longest the follow recipe may take to catch up on the sample: a bound on a hang, not a timing.
CATCH_UP_DEADLINE_S = 120.0


def python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a sample ledger (with the known body) and a sample home, copied
    for each document."""
    root = tmp_path_factory.mktemp("docs")
    ledger = root / "run" / "sessions" / "abc"
    write_sample_ledger(ledger, seed=3, bodies=300)
    with LedgerWriter(ledger) as w:
        w.insert(KNOWN[1], {"event_id": KNOWN[0], "timestamp": "2026-11-30T12:00:00.000000Z",
                            "domain": "api.anthropic.com", "decision": "allowed"},
                 [Body(KNOWN[2], KNOWN_BODY, "http.request", "application/json")])
    write_sample_home(root / "capsem-home", seed=3, sessions=3, bodies=40)
    return root


@pytest.fixture
def workdir(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    here = tmp_path / "work"
    shutil.copytree(template, here)
    monkeypatch.chdir(here)
    monkeypatch.setenv("CAPSEM_HOME", str(here / "capsem-home"))
    monkeypatch.delenv("CAPSEM_RUN_DIR", raising=False)
    monkeypatch.setenv("CAPSEM_CORE_VERIFIED_DIR", str(tmp_path / "verified"))
    return here


def _follow_until_caught_up(code: str, here: Path) -> tuple[str, list[str]]:
    """Run the follow recipe as a process, SIGTERM it once its saved cursor stands after every
    event, and return its output and the tables it followed."""
    state = re.search(r'saved = Path\("([^"]+)"\)', code)
    tables = re.search(r"follow\((\[[^\]]*\])", code)
    assert state and tables, "the follow recipe names its state file and its tables"
    followed: list[str] = ast.literal_eval(tables.group(1))
    saved = here / state.group(1)
    printed = here / "follow.out"   # a file, not a pipe: a full pipe would stall the recipe
    with printed.open("w") as stdout:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=here, stdout=stdout, stderr=subprocess.PIPE,
                                text=True)
    try:
        with Ledger("run/sessions/abc") as ledger:
            def caught_up() -> bool:
                if proc.poll() is not None:
                    raise AssertionError(f"the recipe exited {proc.returncode}: {proc.communicate()[1]}")
                if not saved.exists():
                    return False
                page = ledger.events(followed, after=saved.read_text())
                return page.caught_up and not page.events

            wait_for(caught_up, timeout=CATCH_UP_DEADLINE_S, every=0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert proc.returncode == 0 and err == "", (proc.returncode, err)
    return printed.read_text(), followed


def _event_count(tables: list[str]) -> int:
    with Ledger("run/sessions/abc") as ledger:
        count, cursor = 0, "start"
        while True:
            page = ledger.events(tables, after=cursor, limit=1000)
            count, cursor = count + len(page.events), page.cursor
            if page.caught_up:
                return count


def _run(code: str, name: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    exec(compile(code, name, "exec"), namespace)
    return namespace


def test_the_readme_and_the_api_page_have_python_examples() -> None:
    assert python_blocks(ROOT / "README.md")
    assert len(python_blocks(ROOT / "docs" / "api.md")) >= 8


def test_every_example_names_its_files_relative_to_where_it_runs() -> None:
    """An example that wrote to an absolute path would write outside its test's directory."""
    absolute = {d.name: [path for code in python_blocks(d) for path in re.findall(r"""["'](/[^"']*)["']""", code)]
                for d in DOCUMENTS}
    assert {k: v for k, v in absolute.items() if v} == {}


@pytest.mark.parametrize("doc", [d.name for d in DOCUMENTS if python_blocks(d) and d.name != "README.md"])
def test_every_python_block_of_the_page_runs_against_a_sample_ledger(doc: str, workdir: Path) -> None:
    for i, code in enumerate(python_blocks(ROOT / "docs" / doc)):
        if "signal.SIGTERM" in code:
            out, followed = _follow_until_caught_up(code, workdir)
            assert len(out.splitlines()) == _event_count(followed)   # every event once
            continue
        _run(code, f"docs/{doc} block {i + 1}")


def test_the_readme_example_writes_checks_and_reads_its_body_back(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (code,) = python_blocks(ROOT / "README.md")
    namespace = _run(code, "README.md")
    assert namespace["data"] == b'{"model": "claude"}'
    assert namespace["report"].sound  # type: ignore[attr-defined]
    assert len(namespace["batch"]) == 1  # type: ignore[arg-type]
    assert namespace["page"].events[0].event_id == "0123456789ab"  # type: ignore[attr-defined]
    assert (tmp_path / "backup-abc" / "session.bodies").is_file()


def test_the_api_pages_body_is_the_known_one(workdir: Path) -> None:
    with Ledger("run/sessions/abc") as ledger:
        assert ledger.read_body(*KNOWN) == KNOWN_BODY
    assert os.environ["CAPSEM_HOME"].endswith("capsem-home")
