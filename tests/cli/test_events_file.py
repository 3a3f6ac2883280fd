"""``capsem-ledger events --table T --format parquet|arrow -o FILE``: a table's exact values as
a Parquet or Arrow IPC file, a cursor that resumes after them, the output policy, a clear line
without pyarrow, and no partial file after Ctrl-C, SIGTERM or SIGHUP (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capsem_core.sample import write_sample_ledger
from tests.columns.ledgers import assert_same_rows, poke, rows_of, select_star

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capsem_core", "events", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


def _cursor(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("cursor: ")]
    assert len(lines) == 1, stderr
    return lines[0][len("cursor: "):]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("events-file") / "ledger"
    write_sample_ledger(directory, seed=6, bodies=400)
    return directory


def test_parquet_and_arrow_files_hold_the_tables_exact_values(ledger: Path, tmp_path: Path) -> None:
    for fmt, table in (("parquet", "model_calls"), ("arrow", "event_body_blobs")):
        out = tmp_path / f"out.{fmt}"
        done = _cli("--db", str(ledger), "--table", table, "--format", fmt, "-o", str(out))
        assert done.returncode == 0 and done.stdout == "", done.stderr
        got = pq.read_table(out) if fmt == "parquet" else pa.ipc.open_file(out).read_all()
        assert_same_rows(rows_of(got), select_star(ledger / "session.db", table))
        again = _cli("--db", str(ledger), "--table", table, "--format", fmt, "-o", str(out), "--after",
                     _cursor(done.stderr))
        assert again.returncode == 0, again.stderr
        assert (pq.read_table(out) if fmt == "parquet" else pa.ipc.open_file(out).read_all()).num_rows == 0
    assert sorted(os.listdir(tmp_path)) == ["out.arrow", "out.parquet"]


def test_dash_writes_the_file_to_standard_output(ledger: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "capsem_core", "events", "--db", str(ledger), "--table", "dns_events",
                           "--format", "arrow", "-o", "-"], capture_output=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    got = pa.ipc.open_file(pa.BufferReader(done.stdout)).read_all()
    assert_same_rows(rows_of(got), select_star(ledger / "session.db", "dns_events"))


@pytest.mark.parametrize("args, words", [
    (("--format", "parquet", "--table", "net_events"), "-o FILE"),
    (("--format", "parquet", "-o", "x"), "one --table"),
    (("--format", "parquet", "--table", "net_events", "--table", "dns_events", "-o", "x"), "one --table"),
    (("--format", "arrow", "--table", "nets", "-o", "x"), "not a table of the ledger"),
    (("--format", "arrow", "--table", "net_events", "-o", "x", "--jsonl"), "not with --jsonl"),
    (("--format", "arrow", "--table", "net_events", "-o", "x", "--limit", "3"), "not with --limit"),
    (("-o", "x"), "-o names the file of --format"),
    (("--format", "arrow", "--table", "net_events", "-o", ""), "empty"),
])
def test_arguments_that_do_not_fit_are_one_usage_line_and_write_nothing(ledger: Path, tmp_path: Path,
                                                                         args: tuple[str, ...], words: str) -> None:
    done = subprocess.run([sys.executable, "-m", "capsem_core", "events", "--db", str(ledger), *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode in (1, 2) and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert os.listdir(tmp_path) == []


def test_without_pyarrow_the_command_says_how_to_install_it(ledger: Path, tmp_path: Path) -> None:
    (tmp_path / "pyarrow").mkdir()
    (tmp_path / "pyarrow" / "__init__.py").write_text("raise ImportError('no pyarrow here')\n")
    out = tmp_path / "out.parquet"
    done = _cli("--db", str(ledger), "--table", "net_events", "--format", "parquet", "-o", str(out),
                env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "capsem-ledger events: --format needs pyarrow, which is not installed: pip install 'capsem-core[arrow]'"]
    assert not out.exists()


def test_a_table_of_mixed_storage_classes_is_refused_for_parquet_but_written_as_arrow(ledger: Path,
                                                                                      tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("session.db", "session.bodies"):
        shutil.copy(ledger / name, copy / name)
    poke(copy / "session.db", "UPDATE net_events SET port = 'https' WHERE id = 1")
    done = _cli("--db", str(copy), "--table", "net_events", "--format", "parquet", "-o", str(tmp_path / "o.pq"))
    assert done.returncode == 1 and "net_events.port holds values of several storage classes" in done.stderr
    assert not (tmp_path / "o.pq").exists()
    done = _cli("--db", str(copy), "--table", "net_events", "--format", "arrow", "-o", str(tmp_path / "o.arrow"))
    assert done.returncode == 0, done.stderr
    assert pa.ipc.open_file(tmp_path / "o.arrow").read_all().column("port")[0].as_py() == "https"


_INTERRUPTED = """
import os, signal, sys
import pyarrow.parquet as pq
from capsem_core.cli import app
real = pq.ParquetWriter.write_batch
def write_batch(self, batch, *a, **k):
    real(self, batch, *a, **k)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # a real signal, mid-file
pq.ParquetWriter.write_batch = write_batch
sys.exit(app.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", 130)])
def test_an_interrupt_mid_file_leaves_no_partial_file(ledger: Path, tmp_path: Path, signame: str, code: int) -> None:
    out = tmp_path / "out.parquet"
    out.write_bytes(b"the old file")
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED, signame, "events", "--db", str(ledger), "--table",
                           "event_body_blobs", "--format", "parquet", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"] and out.read_bytes() == b"the old file"
