"""The output-path policy's rule about whose files an output may take: never a file the
command reads, never Capsem's own session.db, session.bodies or main.db, never a name SQLite
or the writer reads as part of one, never a home's VM name links; and the ways to name an output that are ordinary (``./x``,
``../x``, a long name, ``/dev/stdout``) all write. Each through the real command where one
exists."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from capsem_core.errors import LedgerError
from capsem_core.ledger import Ledger
from capsem_core.outputs import output_stream, write_output
from capsem_core.sample import write_sample_home
from capsem_core.writer import Body, LedgerWriter
from tests.cli.ledger_cli import run, run_argv_on_a_terminal
from tests.test_outputs import BODY, ledger  # noqa: F401 (ledger: a fixture)

def digests(directory: Path) -> dict[str, str]:
    """The pair's contents (a read may leave SQLite's empty -wal and -shm beside them)."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in ("session.db", "session.bodies")}


@pytest.mark.parametrize("name", ["session.db", "session.bodies", "session.db-wal", "session.db-journal",
                                  "session.db-writer.lock"])
def test_body_o_never_writes_over_or_beside_the_ledger_it_reads(ledger: Path, tmp_path: Path, name: str) -> None:
    before = digests(ledger)
    done = run("body", "0000000000aa", "--db", str(ledger), "-o", str(ledger / name))
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{ledger / name}: the output file is" in err and "name another file" in err
    assert digests(ledger) == before


def test_the_ledger_reached_by_dot_dot_or_a_linked_directory_is_still_refused(ledger: Path, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "linked").symlink_to(ledger)
    before = digests(ledger)
    for output in (tmp_path / "sub" / ".." / "ledger" / "session.db", tmp_path / "linked" / "session.bodies"):
        done = run("body", "0000000000aa", "--db", str(ledger), "-o", str(output))
        assert done.returncode == 1 and b"which this command reads" in done.stderr, done.stderr
    assert digests(ledger) == before


def test_an_export_or_a_table_file_never_writes_over_its_ledger(ledger: Path) -> None:
    before = digests(ledger)
    with Ledger(ledger) as opened:
        with pytest.raises(LedgerError, match="which this command reads"):
            opened.export_warc(ledger / "session.bodies")
    done = run("export", "--db", str(ledger), "--warc", str(ledger / "session.db"))
    assert done.returncode == 1 and b"which this command reads" in done.stderr, done.stderr
    assert digests(ledger) == before


def test_another_ledgers_files_and_a_main_db_are_capsems_and_never_replaced(ledger: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    with LedgerWriter(other):
        pass
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "main.db").write_bytes(b"Capsem's index")
    before = digests(other)
    for output in (other / "session.db", other / "session.db-shm", tmp_path / "home" / "main.db",
                   tmp_path / "home" / "main.db-wal"):
        with pytest.raises(LedgerError, match="refusing to write there"):
            write_output(output, b"a body")
    assert digests(other) == before and (tmp_path / "home" / "main.db").read_bytes() == b"Capsem's index"
    assert not (tmp_path / "home" / "main.db-wal").exists()


def test_the_vm_name_links_a_command_resolved_its_session_by_are_never_replaced(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_sample_home(home, sessions=2, seed=4, bodies=5)
    links = home / "sessions" / "capsem-core-vm-names.json"
    vm = next(iter(json.loads(links.read_text())["names"]))
    before = links.read_bytes()
    env = dict(os.environ, CAPSEM_HOME=str(home))
    for output in (links, Path(f"{links}.lock")):
        done = subprocess.run([sys.executable, "-m", "capsem_core", "export", vm, "--warc", str(output)],
                              capture_output=True, timeout=120, env=env)
        err = done.stderr.decode()
        assert done.returncode == 1 and err.count("\n") == 1 and "VM name links" in err, err
    assert links.read_bytes() == before
    with pytest.raises(LedgerError, match="VM name links"):
        write_output(links, b"a body")


def test_a_file_merely_named_like_capsems_with_no_database_beside_it_is_written(tmp_path: Path) -> None:
    write_output(tmp_path / "session.db", b"a body that is itself a database")
    assert (tmp_path / "session.db").read_bytes() == b"a body that is itself a database"


def test_dot_slash_and_dot_dot_slash_names_are_ordinary_outputs(ledger: Path, tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    for output, where in (("./here.bin", tmp_path / "work" / "here.bin"), ("../up.bin", tmp_path / "up.bin")):
        done = run("body", "0000000000aa", "--db", str(ledger), "-o", output, cwd=str(tmp_path / "work"))
        assert done.returncode == 0, done.stderr
        assert where.read_bytes() == BODY


def test_a_name_of_the_longest_length_a_file_may_have_is_written(tmp_path: Path) -> None:
    name = "a" * 255
    write_output(tmp_path / name, b"long")
    with output_stream(tmp_path / ("b" * 255)) as out:
        out.write(b"streamed")
    assert (tmp_path / name).read_bytes() == b"long"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, "b" * 255]


def test_dev_stdout_is_standard_output(ledger: Path, tmp_path: Path) -> None:
    if not os.path.islink("/dev/stdout"):
        pytest.skip("/dev/stdout is not a link here")
    done = run("body", "0000000000aa", "--db", str(ledger), "-o", "/dev/stdout")
    assert (done.returncode, done.stdout) == (0, BODY), done.stderr
    done = run("export", "--db", str(ledger), "--warc", "/dev/stdout")
    assert done.returncode == 0 and done.stdout[:2] == b"\x1f\x8b", done.stderr


def test_a_terminal_device_is_never_written_raw(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    try:
        with pytest.raises(LedgerError, match="terminal"):
            write_output(os.ttyname(slave), b"\x1b]0;owned\x07")
    finally:
        os.close(master)
        os.close(slave)


def test_a_disk_that_fills_names_the_output_and_leaves_nothing(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write fails with no file name of its own.
    (The limit leaves room for SQLite's -shm; the body is larger than it.)"""
    ledger = tmp_path / "large"
    with LedgerWriter(ledger) as w:
        w.insert("net_events", {"event_id": "0000000000aa", "timestamp": "2026-11-30T12:00:00.000000Z",
                                "domain": "api.anthropic.com", "decision": "allowed"},
                 bodies=[Body("response", os.urandom(1 << 20), "http.request", "application/octet-stream")])

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    out = tmp_path / "out" / "body.bin"
    out.parent.mkdir()
    done = subprocess.run([sys.executable, "-m", "capsem_core", "body", "0000000000aa", "--db", str(ledger),
                           "-o", str(out)], capture_output=True, timeout=120, preexec_fn=small_files)
    err = done.stderr.decode()
    assert done.returncode == 1 and err == f"capsem-ledger body: {out}: cannot write the output file: File too large\n"
    assert list(out.parent.iterdir()) == []


def test_a_temporary_that_cannot_be_made_is_named_by_the_output(tmp_path: Path) -> None:
    (tmp_path / f".out.bin.part-{os.getpid()}").mkdir()   # in the temporary's way
    with pytest.raises(LedgerError) as raised:
        write_output(tmp_path / "out.bin", b"data")
    assert str(raised.value).startswith(f"{tmp_path / 'out.bin'}: cannot write the output file")


def test_a_fifo_whose_reader_leaves_early_is_a_failure_not_a_success(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    opened = threading.Event()

    def read_a_little() -> None:
        fd = os.open(fifo, os.O_RDONLY)
        opened.set()
        os.read(fd, 10)
        os.close(fd)

    reader = threading.Thread(target=read_a_little)
    reader.start()
    # The writer's open must find the reader there: retried until it does (no timing).
    while True:
        try:
            write_output(fifo, b"x" * (8 << 20))
        except LedgerError as exc:
            if "no reader" in str(exc):
                continue
            assert "reader closed it before the output was whole" in str(exc), exc
            break
        raise AssertionError("a write past a reader that left was taken for a whole one")
    reader.join()
    assert opened.is_set()


def test_an_export_to_stdout_whose_reader_leaves_early_is_a_failure_not_a_success(tmp_path: Path) -> None:
    """`export --warc - | head -c 100` delivered 100 bytes of the WARC and exited 0: for a
    stream whose end is its proof of being whole, a reader that left is a failure."""
    directory = tmp_path / "big"
    with LedgerWriter(directory) as w:
        for i in range(40):   # 2.5 MiB that deflate cannot shrink: far more than a pipe holds
            w.insert("net_events", {"event_id": f"{i:012x}", "timestamp": "2026-11-30T12:00:00.000000Z",
                                    "domain": "api.anthropic.com", "decision": "allowed"},
                     bodies=[Body("response", os.urandom(64 << 10), "http.request")])
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", "export", "--db", str(directory), "--warc", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)[:2] == b"\x1f\x8b"
    proc.stdout.close()   # the reader leaves; the writer still has megabytes to write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert err == "capsem-ledger export: standard output: the output's reader closed it before the output was " \
                  "whole\n", err


def test_the_api_never_streams_an_output_to_a_terminal(ledger: Path) -> None:
    code, shown, err = run_argv_on_a_terminal([sys.executable, "-c", (
        "import sys\nfrom capsem_core import Ledger\nfrom capsem_core.errors import LedgerError\n"
        f"try:\n    Ledger({str(ledger)!r}).export_warc('-', level=0)\n"
        "except LedgerError as exc:\n    sys.exit(f'refused: {exc}')")])
    assert code == 1 and shown == b"", shown
    assert err.decode().startswith("refused: standard output: it is a terminal"), err
