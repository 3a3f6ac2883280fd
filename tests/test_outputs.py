"""The one output-path policy (capsem_core.outputs), through the commands that write:
``body -o``, ``export`` and ``sample``. Nothing but a regular file is ever replaced, no missing
parent is created, a name that resolves to ., .. or / is refused, and ``-o -`` is stdout."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from capsem_core.errors import LedgerError
from capsem_core.outputs import check_output_name, file_at, open_output_dir, write_file_at, write_output
from capsem_core.writer import Body, LedgerWriter
from tests.cli.ledger_cli import run

BODY = bytes(range(256)) * 8


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    directory = tmp_path / "ledger"
    with LedgerWriter(directory) as w:
        w.insert("net_events", {"event_id": "0000000000aa", "timestamp": "2026-11-30T12:00:00.000000Z",
                                "domain": "api.anthropic.com", "decision": "allowed"},
                 bodies=[Body("response", BODY, "http.request", "application/octet-stream")])
    return directory


def body_to(ledger: Path, output: str, cwd: Path) -> tuple[int, bytes, str]:
    done = run("body", "0000000000aa", "--db", str(ledger), "-o", output, cwd=str(cwd))
    return done.returncode, done.stdout, done.stderr.decode()


def listing(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.mark.parametrize("output", ["", ".", "..", "/", "x/..", "x/.", "//", "sub/../.."])
def test_body_o_refuses_a_name_that_is_empty_or_resolves_to_a_directory_as_a_usage_error(
        ledger: Path, tmp_path: Path, output: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "sub").mkdir()
    before = listing(work)
    code, out, err = body_to(ledger, output, work)
    assert code == 2 and out == b"", err
    last = err.rstrip("\n").split("\n")[-1]
    assert err.startswith("usage: capsem-ledger body") and "Traceback" not in err
    assert last.startswith("capsem-ledger body: error: argument -o/--output: "), last
    assert listing(work) == before


def test_body_o_never_creates_a_missing_parent_directory(ledger: Path, tmp_path: Path) -> None:
    code, _, err = body_to(ledger, str(tmp_path / "nonexistent" / "x.bin"), tmp_path)
    assert code == 1 and "does not exist" in err and not (tmp_path / "nonexistent").exists()


def test_body_o_dash_is_standard_output(ledger: Path, tmp_path: Path) -> None:
    code, out, err = body_to(ledger, "-", tmp_path)
    assert (code, out, err) == (0, BODY, "") and not (tmp_path / "-").exists()


def test_body_o_replaces_a_regular_file_whole(ledger: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.bin"
    out.write_bytes(b"old")
    assert body_to(ledger, str(out), tmp_path)[0] == 0
    assert out.read_bytes() == BODY and [p.name for p in tmp_path.iterdir() if ".part-" in p.name] == []


def test_a_replaced_file_keeps_its_permissions(ledger: Path, tmp_path: Path) -> None:
    out = tmp_path / "private.bin"
    out.write_bytes(b"old")
    out.chmod(0o600)
    assert body_to(ledger, str(out), tmp_path)[0] == 0
    assert out.read_bytes() == BODY and stat.S_IMODE(out.stat().st_mode) == 0o600
    dir_fd = open_output_dir(tmp_path)
    try:
        out.chmod(0o640)
        write_file_at(dir_fd, out.name, b"new", tmp_path)
    finally:
        os.close(dir_fd)
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o640


def test_body_o_writes_into_a_character_device_and_leaves_it_a_device(ledger: Path, tmp_path: Path) -> None:
    before = os.stat("/dev/null")
    assert body_to(ledger, "/dev/null", tmp_path)[0] == 0
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_body_o_to_a_full_device_is_one_line_and_the_device_stays(ledger: Path, tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    before = os.stat("/dev/full")
    code, _, err = body_to(ledger, "/dev/full", tmp_path)
    assert code == 1 and "No space left on device" in err and err.count("\n") == 1
    after = os.lstat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_body_o_writes_into_a_fifo_with_a_reader(ledger: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:  # opens once the writer does; reads to its end
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    # The reader's open blocks until a writer opens; the command's non-blocking open can race
    # ahead of it, so the command is retried until a reader holds the FIFO (no timing).
    while True:
        code, _, err = body_to(ledger, str(fifo), tmp_path)
        if code == 0 or "no reader" not in err:
            break
    reader.join()
    assert code == 0 and got == [BODY] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_body_o_refuses_a_fifo_without_a_reader_rather_than_hang(ledger: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = body_to(ledger, str(fifo), tmp_path)
    assert code == 1 and "has no reader" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_body_o_refuses_a_directory_and_a_link(ledger: Path, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    code, _, err = body_to(ledger, str(tmp_path / "d"), tmp_path)
    assert code == 1 and "is a directory" in err and (tmp_path / "d").is_dir()
    (tmp_path / "link").symlink_to("/dev/null")
    code, _, err = body_to(ledger, str(tmp_path / "link"), tmp_path)
    assert code == 1 and "symbolic link" in err and (tmp_path / "link").is_symlink()


def test_export_refuses_an_empty_directory_name_as_a_usage_error_and_writes_nothing_here(
        ledger: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    done = run("export", "--db", str(ledger), "", cwd=str(work))
    assert done.returncode == 2 and b"empty" in done.stderr and list(work.iterdir()) == []


def test_export_creates_its_directory_but_never_a_missing_parent(ledger: Path, tmp_path: Path) -> None:
    done = run("export", "--db", str(ledger), str(tmp_path / "a" / "b"))
    assert done.returncode == 1 and b"does not exist" in done.stderr and not (tmp_path / "a").exists()
    done = run("export", "--db", str(ledger), str(tmp_path / "out"))
    assert done.returncode == 0 and (tmp_path / "out" / "manifest.jsonl").is_file()


def test_export_never_replaces_what_is_not_a_regular_file(ledger: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "manifest.jsonl")
    done = run("export", "--db", str(ledger), str(out))
    assert done.returncode == 1 and b"manifest.jsonl: the output file is a FIFO; refusing to replace it" in done.stderr
    assert stat.S_ISFIFO(os.lstat(out / "manifest.jsonl").st_mode)


def test_sample_refuses_dot_names_and_never_creates_a_missing_parent(tmp_path: Path) -> None:
    for name in ("", ".", "..", "x/.."):
        done = run("sample", name, "--bodies", "5", cwd=str(tmp_path))
        assert done.returncode in (1, 2) and b"Traceback" not in done.stderr, name
    done = run("sample", str(tmp_path / "missing" / "s"), "--bodies", "5")
    assert done.returncode == 1 and not (tmp_path / "missing").exists()
    assert list(tmp_path.iterdir()) == []


def test_write_file_at_refuses_a_fifo_already_at_the_name(tmp_path: Path) -> None:
    fd = open_output_dir(tmp_path)
    try:
        os.mkfifo(tmp_path / "late")
        with pytest.raises(LedgerError, match="is a FIFO; refusing to replace it"):
            write_file_at(fd, "late", b"data", tmp_path)
        assert stat.S_ISFIFO(os.lstat(tmp_path / "late").st_mode)
        assert [p.name for p in tmp_path.iterdir()] == ["late"]
    finally:
        os.close(fd)


def test_a_file_in_a_directory_rechecks_the_name_before_it_renames(tmp_path: Path) -> None:
    """A link planted at the name while the temporary file is written is not replaced."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"keep")
    (tmp_path / "out").mkdir()
    fd = open_output_dir(tmp_path / "out")
    try:
        with pytest.raises(LedgerError, match="became a symbolic link while it was written; not replaced"):
            with file_at(fd, "late", tmp_path / "out") as out:
                out.write(b"data")
                os.symlink(secret, tmp_path / "out" / "late")
        assert (tmp_path / "out" / "late").is_symlink() and secret.read_bytes() == b"keep"
        assert [p.name for p in (tmp_path / "out").iterdir()] == ["late"]
    finally:
        os.close(fd)


def test_a_file_in_a_directory_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    """An exception while the file is streamed removes its temporary file and keeps the old one."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest").write_bytes(b"old")
    fd = open_output_dir(tmp_path / "out")
    try:
        with pytest.raises(KeyboardInterrupt):
            with file_at(fd, "manifest", tmp_path / "out") as out:
                out.write(b"new, half")
                raise KeyboardInterrupt
        assert [p.name for p in (tmp_path / "out").iterdir()] == ["manifest"]
        assert (tmp_path / "out" / "manifest").read_bytes() == b"old"
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["", ".", "..", "/", "a/..", "a\0b"])
def test_check_output_name_refuses_every_name_that_is_not_its_own(name: str) -> None:
    with pytest.raises(LedgerError):
        check_output_name(name)


def test_write_output_refuses_a_trailing_slash(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="trailing"):
        write_output(str(tmp_path / "x") + "/", b"data")
    assert list(tmp_path.iterdir()) == []


def test_a_bare_file_name_is_written_in_the_current_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from capsem_core.outputs import output_stream, write_output

    monkeypatch.chdir(tmp_path)
    write_output("whole.bin", b"whole")
    with output_stream("streamed.bin") as out:
        out.write(b"streamed")
    assert (tmp_path / "whole.bin").read_bytes() == b"whole"
    assert (tmp_path / "streamed.bin").read_bytes() == b"streamed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streamed.bin", "whole.bin"]
