"""``capsem-ledger export --warc``, as a real process: exit 0 when every body was written, 1
when any was skipped (each named on stderr, sanitized), 2 for usage errors; ``-`` streams to
stdout; an interrupt or a refused destination leaves nothing behind."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.bodies.conftest import write_blocks_ledger
from tests.cli.ledger_cli import run, run_on_a_terminal
from tests.export.conftest import HOSTILE_SKIPS, read_warcio, write_hostile_ledger, write_upstream_ledger


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    write_upstream_ledger(tmp_path / "led")
    return tmp_path / "led"


def test_a_whole_export_exits_0_with_one_line_of_totals(upstream: Path, tmp_path: Path) -> None:
    done = run("export", "--db", str(upstream), "--warc", str(tmp_path / "out.warc.gz"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exported 10 records (")
    assert [r.type for r in read_warcio(tmp_path / "out.warc.gz")] == ["warcinfo"] + ["resource"] * 10 + ["warcinfo"]


def test_skipped_bodies_are_named_sanitized_on_stderr_and_exit_1(tmp_path: Path) -> None:
    write_hostile_ledger(tmp_path / "h")
    done = run("export", "--db", str(tmp_path / "h"), "--warc", str(tmp_path / "out.warc.gz"))
    assert done.returncode == 1
    err = done.stderr.decode()
    lines = err.splitlines()
    assert len(lines) == len(HOSTILE_SKIPS) + 1
    for (event_id, table, direction), (reason, field) in HOSTILE_SKIPS.items():
        line = next(x for x in lines if f"skipped {event_id} {table}/{direction}: {reason}" in x)
        assert line.startswith("capsem-ledger export: ")
        assert (f"({field})" in line) == (field is not None)
    # The forged header and the newline in a tool name are shown escaped, never acted on.
    assert "\r" not in err and "\\r\\nWARC-Type: revisit" in err
    assert lines[-1].startswith("exported 2 records") and f"{len(HOSTILE_SKIPS)} bodies skipped" in lines[-1]
    assert (tmp_path / "out.warc.gz").is_file()  # what could be described is written, and closed


def test_past_the_sample_the_rest_are_counted_not_named(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "b", count=30, size=2000)
    with sqlite3.connect(tmp_path / "b" / "session.db") as conn:
        conn.execute("DELETE FROM net_events")
        conn.execute("DELETE FROM model_calls")
    conn.close()
    done = run("export", "--db", str(tmp_path / "b"), "--warc", str(tmp_path / "o.warc.gz"))
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1 and len(lines) == 32 + 2
    assert lines[32] == "capsem-ledger export: ... and 28 more skipped bodies not named"
    assert "60 bodies skipped (60 missing-source-row)" in lines[-1]


@pytest.mark.parametrize("argv, words", [
    (["--warc", "o.warc.gz", "SESSION", "DIR"], "two different exports"),
    (["--warc", "o.warc.gz", "WORD"], "not both"),
    (["--warc-level", "3", "DIR"], "--warc-level is the compression of --warc"),
    (["--warc", "o.warc.gz", "--warc-level", "13"], "13 is out of range"),
    (["--warc", "o.warc.gz", "--warc-level", "-1"], "negative"),
    (["--warc", ""], "the output file is empty"),
    ([], "name what to export to"),
])
def test_usage_errors_exit_2_and_write_nothing(upstream: Path, tmp_path: Path, argv: list[str], words: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    done = run("export", "--db", str(upstream), *argv, cwd=str(work))
    assert done.returncode == 2 and words in done.stderr.decode(), done.stderr
    assert list(work.iterdir()) == []


def test_dash_streams_the_whole_file_to_stdout(upstream: Path) -> None:
    done = run("export", "--db", str(upstream), "--warc", "-")
    assert done.returncode == 0 and "to stdout" in done.stderr.decode()
    from warcio.archiveiterator import ArchiveIterator

    records = list(ArchiveIterator(io.BytesIO(done.stdout)))
    assert len(records) == 12 and records[-1].rec_type == "warcinfo"


def test_dash_refuses_a_terminal(upstream: Path) -> None:
    code, shown, err = run_on_a_terminal("export", "--db", str(upstream), "--warc", "-")
    assert code == 1 and shown == b"" and b"not written to a terminal" in err


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 MB of random bodies: seconds of work at level 12, time for a signal to land."""
    directory = tmp_path_factory.mktemp("big") / "l"
    write_blocks_ledger(directory, count=60, size=400_000)
    return directory


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, b"terminated"), (signal.SIGINT, 130, b"interrupted")])
def test_an_interrupted_export_leaves_the_old_file_and_no_partial_one(big: Path, tmp_path: Path, sig: int, code: int,
                                                                       word: bytes) -> None:
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    (out_dir / "x.warc.gz").write_bytes(b"the previous export")
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", "export", "--db", str(big), "--warc",
                             str(out_dir / "x.warc.gz"), "--warc-level", "12"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    part = out_dir / f".x.warc.gz.part-{proc.pid}"
    # The temporary file exists from before the ledger's bodies are read until the closing
    # record is written: signal while it does (level 12 over 24 MB of random bytes).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not part.exists() and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and word in err, err
    assert [p.name for p in out_dir.iterdir()] == ["x.warc.gz"]
    assert (out_dir / "x.warc.gz").read_bytes() == b"the previous export"


def test_a_fifo_with_a_reader_is_streamed_into_and_stays_a_fifo(upstream: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    while True:  # retried until the reader holds the FIFO (no timing)
        done = run("export", "--db", str(upstream), "--warc", str(fifo))
        if done.returncode == 0 or b"no reader" not in done.stderr:
            break
    reader.join()
    assert done.returncode == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    from warcio.archiveiterator import ArchiveIterator

    assert len(list(ArchiveIterator(io.BytesIO(got[0])))) == 12


def test_a_device_is_written_into_and_a_directory_or_a_link_refused(upstream: Path, tmp_path: Path) -> None:
    assert run("export", "--db", str(upstream), "--warc", "/dev/null").returncode == 0
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    (tmp_path / "d").mkdir()
    done = run("export", "--db", str(upstream), "--warc", str(tmp_path / "d"))
    assert done.returncode == 1 and b"is a directory" in done.stderr
    (tmp_path / "link").symlink_to(tmp_path / "target")
    done = run("export", "--db", str(upstream), "--warc", str(tmp_path / "link"))
    assert done.returncode == 1 and b"symbolic link" in done.stderr
    assert not (tmp_path / "target").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "led", "link"]
    assert list((tmp_path / "d").iterdir()) == []


def test_a_missing_ledger_creates_no_output(tmp_path: Path) -> None:
    done = run("export", "--db", str(tmp_path / "nowhere"), "--warc", str(tmp_path / "o.warc.gz"))
    assert done.returncode == 1 and list(tmp_path.iterdir()) == []


def test_the_export_reads_the_ledger_without_writing_it(upstream: Path, tmp_path: Path) -> None:
    pair = (upstream / "session.db", upstream / "session.bodies")
    before = [p.read_bytes() for p in pair]
    assert run("export", "--db", str(upstream), "--warc", str(tmp_path / "o.warc.gz")).returncode == 0
    assert [p.read_bytes() for p in pair] == before
