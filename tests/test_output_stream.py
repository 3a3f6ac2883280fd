"""``outputs.output_stream``: the output-path policy for an output streamed as it is made
(``export --warc``). A regular file appears under its name only when the stream ended
normally; any exception leaves the old file (or nothing) and no temporary file; devices and
FIFOs are written into and stay what they are; links, directories and missing parents are
refused before anything is created; ``-`` is standard output."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from capsem_core.errors import LedgerError, SymlinkRefused
from capsem_core.outputs import output_stream, write_output


def test_a_new_file_appears_whole_only_when_the_stream_ends(tmp_path: Path) -> None:
    target = tmp_path / "out.warc.gz"
    with output_stream(target) as out:
        out.write(b"first ")
        # Meanwhile only the temporary file exists, beside the name, hidden.
        assert not target.exists()
        assert [p.name for p in tmp_path.iterdir()] == [f".out.warc.gz.part-{os.getpid()}"]
        out.write(b"second")
    assert target.read_bytes() == b"first second"
    assert [p.name for p in tmp_path.iterdir()] == ["out.warc.gz"]


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_an_exception_inside_leaves_the_old_file_and_no_temporary_one(tmp_path: Path, exc: BaseException) -> None:
    target = tmp_path / "out.warc.gz"
    target.write_bytes(b"the previous export")
    with pytest.raises(type(exc)):
        with output_stream(target) as out:
            out.write(b"half of a new one")
            raise exc
    assert target.read_bytes() == b"the previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["out.warc.gz"]


def test_a_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    out = tmp_path / "table.parquet"
    out.write_bytes(b"old")
    out.chmod(0o600)
    with output_stream(out) as f:
        f.write(b"new")
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_an_exception_leaves_no_file_where_there_was_none(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with output_stream(tmp_path / "new") as out:
            out.write(b"x" * (1 << 20))
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_a_character_device_is_written_into_and_stays_a_device(tmp_path: Path) -> None:
    before = os.stat("/dev/null")
    with output_stream("/dev/null") as out:
        out.write(b"gone")
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_a_fifo_with_a_reader_gets_the_stream_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    opened = threading.Event()

    def read() -> None:
        with open(fifo, "rb") as f:
            opened.set()
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    # The reader's open returns once a writer has opened too: retry the non-blocking open
    # until a reader holds the FIFO (no timing).
    while True:
        try:
            with output_stream(fifo) as out:
                out.write(b"one ")
                out.write(b"two")
            break
        except LedgerError as exc:
            assert "no reader" in str(exc)
    reader.join()
    assert got == [b"one two"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_without_a_reader_is_refused_rather_than_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError, match="no reader"):
        with output_stream(fifo):
            raise AssertionError("never entered")


def test_a_link_a_directory_a_missing_parent_and_a_trailing_slash_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    cases = [(tmp_path / "link", SymlinkRefused, "symbolic link"), (tmp_path / "d", LedgerError, "a directory"),
             (tmp_path / "no" / "such" / "out", LedgerError, "does not exist"),
             (f"{tmp_path}/x/", LedgerError, "trailing"), ("", LedgerError, "empty")]
    for path, cls, words in cases:
        with pytest.raises(cls, match=words):
            with output_stream(path):
                raise AssertionError("never entered")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "link"]
    assert not (tmp_path / "elsewhere").exists()


def test_dash_is_standard_output(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    with output_stream("-") as out:
        out.write(b"to stdout")
    assert capfdbinary.readouterr().out == b"to stdout"


def test_a_bare_file_name_is_written_in_the_current_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A name with no directory part names a file here, not the directory ".".
    monkeypatch.chdir(tmp_path)
    with output_stream("streamed") as out:
        out.write(b"one")
    write_output("whole", b"two")
    assert (tmp_path / "streamed").read_bytes() == b"one" and (tmp_path / "whole").read_bytes() == b"two"
