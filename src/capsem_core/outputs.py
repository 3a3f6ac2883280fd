"""The one output-path policy: how every command writes a file out of a ledger.

``body -o``, ``export``, ``sample``, ``Ledger.copy_to`` and the verification record write
through here, so one rule holds everywhere:

- an output path is never ``''`` and never names ``.``, ``..`` or ``/`` (``x/..`` included):
  such a name would write into a directory the user did not name;
- a missing parent directory is never created; a command that documents creating its output
  directory (``export DIR``, ``sample DIR``) creates that one directory only;
- only a regular file is replaced, and atomically: the bytes go to a fresh temporary file in
  the same directory (through a descriptor of it, no link followed), renamed over the name
  once whole, so an interrupt leaves the old file or the new one, never a mix; the new file
  keeps the old one's permissions;
- an existing character device or FIFO is written into, as ``cp`` does (a FIFO only when a
  reader holds it open: never a hang; never a terminal, which a ledger's bytes could drive);
  it is never unlinked or renamed over. A block device, a socket or a directory is refused in
  one line, as is a symbolic link;
- ``-`` is standard output (``body -o -``, ``export --warc -``), as is a link to it
  (``/dev/stdout``, ``/dev/fd/1``);
- an output never replaces a file the command reads, nor Capsem's own ``session.db``,
  ``session.bodies`` or ``main.db``, nor puts a file SQLite or the writer would take for one
  of theirs (``-wal``, ``-shm``, ``-journal``, ``-writer.lock``) beside one, nor replaces the
  VM name links capsem-core keeps beside a main.db or their lock; the directory is compared
  by identity, so ``..``, a link or a bind mount reaching it changes nothing.

``write_output`` writes bytes already in hand; ``output_stream`` is the same policy for an
output streamed as it is made (``export --warc``): the temporary file is renamed into place
only when the stream ends normally. Inside an output directory opened once
(``open_output_dir``), ``file_at`` and ``write_file_at`` are the same rule per file (``export
DIR``'s bodies and its streamed manifest, the verification record).

Every refusal, and every failure to write, is a LedgerError naming the output path (never
its hidden temporary).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from capsem_core.errors import LedgerError, SymlinkRefused
from capsem_core.paths import (
    SESSION_BODIES, SESSION_DB, STDOUT_NAME, VM_NAMES_FILE, VM_NAMES_LOCK_SUFFIX, WRITER_LOCK_SUFFIX,
)

PathArg = os.PathLike[str] | str
STDOUT = "-"
PART_SUFFIX = ".part-"

NAME_MAX = 255
# Capsem's files, and the names beside one that SQLite or the writer reads as part of it.
CAPSEM_FILES = (SESSION_DB, SESSION_BODIES, "main.db")
SIDECARS = ("-wal", "-shm", "-journal", WRITER_LOCK_SUFFIX)
# What a write that ran out of room or hit a bad disk raises with no file name of its own.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


def check_output_name(path: PathArg, what: str = "output path") -> None:
    """LedgerError when ``path`` is empty or its last component is ``.``, ``..`` or ``/``
    (as typed: ``x/..`` is refused, not taken for ``.``)."""
    raw = os.fspath(path)
    if raw == "":
        raise LedgerError(f"the {what} is empty (\"\" is not the current directory): name a file or directory")
    if "\x00" in raw:
        raise LedgerError(f"the {what} holds a NUL character", raw.replace("\x00", "\\0"))
    last = os.path.basename(raw.rstrip("/"))
    if raw.rstrip("/") == "" or last in (".", ".."):
        raise LedgerError(f"the {what} names {'/' if not raw.rstrip('/') else last}, not a name of its own: "
                          "name a new file or directory", raw)


def open_output_dir(path: PathArg, *, create: bool = False) -> int:
    """A descriptor of the directory ``path``, opened without following a symbolic link, so
    every file written through it (``write_file_at``) lands inside it. With ``create``, a
    missing ``path`` is made (that directory only: its parent must exist). SymlinkRefused
    for a link, LedgerError for a bad name, a missing parent, or something not a directory."""
    check_output_name(path, "output directory")
    _refuse_link(path, "output directory")
    if create:
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            pass
        except FileNotFoundError as exc:
            if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise LedgerError("the directory holding the output directory does not exist (it is not created)",
                                  path) from None
            raise LedgerError(f"cannot create the output directory: {exc.strerror}", path) from None
        except OSError as exc:
            raise LedgerError(f"cannot create the output directory: {exc.strerror}", path) from None
    return _open_dir(path, "output directory", follow=False)


def _open_dir(path: PathArg, what: str, *, follow: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise LedgerError(f"the {what} does not exist (it is not created)", path) from None
    except NotADirectoryError:
        raise LedgerError("the output path is not a directory" if what == "output directory"
                          else f"the {what} is not a directory", path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise SymlinkRefused(f"refusing an {what} that is a symbolic link", path) from None
        raise LedgerError(f"cannot open the {what}: {exc.strerror}", path) from None


def _refuse_link(path: PathArg, what: str) -> None:
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return
    if link:
        raise SymlinkRefused(f"refusing an {what} that is a symbolic link", path)


def names_stdout(path: PathArg) -> bool:
    """Whether ``path`` is ``-`` or a link to this process's standard output
    (``/dev/stdout``, ``/dev/fd/1``): written as ``-`` is, whatever stdout is."""
    raw = os.fspath(path)
    if raw == STDOUT:
        return True
    try:
        return stat.S_ISLNK(os.lstat(raw).st_mode) and os.path.samestat(os.stat(raw), os.fstat(1))
    except (OSError, ValueError):
        return False


def _output_file(path: PathArg) -> tuple[str, str]:
    """``(raw path, what stands there)`` of an output file name under the policy: "file" for
    a regular file or nothing (to be replaced atomically), "device" or "fifo" (written
    into). A bad name, a link, a directory, a block device or a socket is refused."""
    check_output_name(path, "output file")
    raw = os.fspath(path)
    if raw.endswith("/"):
        raise LedgerError("the output file is named with a trailing '/': name a file", raw)
    try:
        st: os.stat_result | None = os.lstat(raw)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise LedgerError(f"cannot look at the output file: {exc.strerror}", raw) from None
    if st is None:
        return raw, "file"
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise SymlinkRefused("refusing an output file that is a symbolic link"
                             + (" (name - for standard output)" if names_stdout(raw) else ""), raw)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return raw, "fifo" if stat.S_ISFIFO(mode) else "device"
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise LedgerError(f"the output file is {kind}; refusing to write there", raw)
    return raw, "file"


def refuse_capsem_file(dir_fd: int, name: str, shown: PathArg, inputs: Sequence[PathArg] = ()) -> None:
    """LedgerError when writing ``name`` in the directory ``dir_fd`` would replace a file the
    command reads (one of ``inputs``) or Capsem's own ``session.db``, ``session.bodies`` or
    ``main.db``, or would put beside one a name SQLite or the writer reads as part of it
    (``-wal``, ``-shm``, ``-journal``, ``-writer.lock``), or would replace a home's VM name
    links (``capsem-core-vm-names.json``) or their lock. Directories are compared by identity,
    so ``..``, a link or a bind mount reaching the same one is caught."""
    here = os.fstat(dir_fd)
    for path in inputs:
        folder, base = os.path.split(os.path.abspath(os.fspath(path)))
        if name != base and name not in {base + suffix for suffix in SIDECARS}:
            continue
        try:
            same = os.path.samestat(here, os.stat(folder))
        except OSError:
            continue
        if same:
            what = base if name == base else f"{name}, a sidecar SQLite or the writer reads as part of {base}"
            raise LedgerError(f"the output file is {what}, which this command reads; refusing to write "
                              "there: name another file", shown)
    base = next((name[:-len(suffix)] for suffix in SIDECARS if name.endswith(suffix)), name)
    if base in CAPSEM_FILES and exists_at(dir_fd, base):
        what = f"Capsem's {base}" if name == base else f"{name}, which SQLite or the writer reads as part of {base}"
        raise LedgerError(f"the output file is {what}; refusing to write there: name another file", shown)
    # The VM name links are read to resolve a name (so `body NAME -o` there would replace
    # what the command read) and every later name needs them.
    if name in (VM_NAMES_FILE, VM_NAMES_FILE + VM_NAMES_LOCK_SUFFIX) and (
            exists_at(dir_fd, VM_NAMES_FILE) or exists_at(dir_fd, "main.db")):
        raise LedgerError(f"the output file is {name}, capsem-core's VM name links of the home beside it; "
                          "refusing to write there: name another file", shown)


def exists_at(dir_fd: int, name: str) -> bool:
    """Whether anything (a link included, not followed) is at ``name`` in ``dir_fd``."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def part_name(name: str) -> str:
    """The hidden temporary a file ``name`` is written as: ``.{name}.part-{pid}``, or, where
    that would pass the 255 bytes a name may have, ``name`` cut short with a checksum of all
    of it, so any name that may be written can be."""
    part = f".{name}{PART_SUFFIX}{os.getpid()}"
    if len(os.fsencode(part)) <= NAME_MAX:
        return part
    import zlib

    whole = os.fsencode(name)
    tail = f"~{zlib.crc32(whole):08x}{PART_SUFFIX}{os.getpid()}"
    return f".{os.fsdecode(whole[:NAME_MAX - 1 - len(tail)])}{tail}"


def _write_failed(exc: BaseException, tmp: str, shown: PathArg) -> BaseException:
    """An OSError from creating or filling the temporary ``tmp`` as a LedgerError naming the
    output; any other exception as it is."""
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError) and (
            exc.filename == tmp or (exc.filename is None and exc.errno in _WRITE_ERRNOS)):
        return LedgerError(f"cannot write the output file: {exc.strerror}", shown)
    return exc


def write_output(path: PathArg, data: bytes | memoryview, *, inputs: Sequence[PathArg] = ()) -> None:
    """Write ``data`` to the file ``path`` under the policy above: a regular file (or a new
    name) replaced atomically in its existing directory, a character device or a FIFO with a
    reader written into, anything else refused, as is a file of ``inputs`` (the files the
    command reads) or of Capsem's. ``-`` is not handled here: the command writes standard
    output itself."""
    raw, kind = _output_file(path)
    if kind != "file":
        _write_into(raw, data, fifo=kind == "fifo")
        return
    parent, name = os.path.split(raw)
    dir_fd = _parent_dir(parent)
    try:
        refuse_capsem_file(dir_fd, name, raw, inputs)
        write_file_at(dir_fd, name, data, parent or None)
    finally:
        os.close(dir_fd)


def _parent_dir(parent: str) -> int:
    """A descriptor of the directory an output file's name lies in: ``parent`` (the user's
    way to it, ``.``, ``..`` and links included; only the file's own name is held to the
    policy), or the current directory for a bare name."""
    return _open_dir(parent or ".", "directory holding the output file", follow=True)


@contextmanager
def output_stream(path: PathArg, *, inputs: Sequence[PathArg] = ()) -> Iterator[BinaryIO]:
    """A binary file to stream an output of unknown size into, under the policy above.

    A regular file (or a new name) is written as a fresh temporary file in its directory
    (``part_name``: O_EXCL, no link followed), renamed over the name only when the ``with``
    block ends normally; any exception (Ctrl-C and SIGTERM's ``Terminated`` included)
    removes it, so no partial file is ever left under the name or beside it. A character
    device or a FIFO with a reader is written into as the bytes come (nothing to remove:
    what was written has gone; a reader that leaves early is a LedgerError). ``-`` (or a link
    to standard output) is standard output, flushed at the end and never closed, refused when
    it is a terminal; its reader leaving early is a LedgerError too (an output cut short is
    not a success, whatever ``| head`` means for text). Refusals as ``write_output``'s,
    before anything is created."""
    if names_stdout(path):
        if sys.stdout.isatty():
            raise LedgerError("it is a terminal, which an output's raw bytes could drive: "
                              "redirect it or name a file", STDOUT_NAME)
        out = sys.stdout.buffer
        try:
            yield out
            out.flush()
        except OSError as exc:
            if not (isinstance(exc, BrokenPipeError) or exc.filename is None and exc.errno in _WRITE_ERRNOS):
                raise
            # (What is still buffered for stdout is the command line's to discard: a library
            # never rewires its caller's descriptors.)
            raise _into_failed(exc, None, STDOUT_NAME) from None
        return
    raw, kind = _output_file(path)
    if kind != "file":
        what = "FIFO" if kind == "fifo" else "device"
        try:
            with open(_open_into(raw, fifo=kind == "fifo"), "wb", closefd=True) as into:
                yield into
        except OSError as exc:
            if not (isinstance(exc, BrokenPipeError) or exc.filename is None and exc.errno in _WRITE_ERRNOS):
                raise
            raise _into_failed(exc, what, raw) from None
        return
    parent, name = os.path.split(raw)
    dir_fd = _parent_dir(parent)
    try:
        refuse_capsem_file(dir_fd, name, raw, inputs)
        with file_at(dir_fd, name, parent or None) as out:
            yield out
    finally:
        os.close(dir_fd)


def _keep_mode(dir_fd: int, name: str, fd: int) -> None:
    """A file replaced keeps its permissions: the temporary ``fd`` takes those of the regular
    file at ``name`` (a body or a table its owner made private stays private)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o777)


def _open_into(path: str, *, fifo: bool) -> int:
    """A descriptor writing into an existing device or FIFO, which is never created,
    truncated or replaced. A FIFO is opened non-blocking first: without a reader that is
    ENXIO, one line, not a hang; then it blocks as a pipe does. A terminal is
    refused (a ledger's bytes could drive it), as is whatever stands there by the time it is
    open if it is not a device or a FIFO any more."""
    what = "FIFO" if fifo else "device"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if fifo else 0))
    except OSError as exc:
        if fifo and exc.errno == errno.ENXIO:
            raise LedgerError("the output FIFO has no reader; refusing to wait for one", path) from None
        raise LedgerError(f"cannot open the output {what}: {exc.strerror}", path) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise LedgerError(f"the output {what} was replaced while it was opened; nothing written", path)
        if os.isatty(fd):
            raise LedgerError("the output is a terminal, which a ledger's bytes could drive: name - for "
                              "standard output (text shown escaped) or a file", path)
        if fifo:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _into_failed(exc: OSError, what: str | None, path: str) -> LedgerError:
    """A failed write into a device or a FIFO (``what``), or standard output (None), in one
    line naming it."""
    subject = f"the output {what}" if what else "the output"
    if isinstance(exc, BrokenPipeError):
        return LedgerError(f"{subject}'s reader closed it before the output was whole", path)
    return LedgerError(f"cannot write to {subject}: {exc.strerror}", path)


def _write_into(path: str, data: bytes | memoryview, *, fifo: bool) -> None:
    """Write into an existing device or FIFO without creating, truncating or replacing it."""
    fd = _open_into(path, fifo=fifo)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise _into_failed(exc, "FIFO" if fifo else "device", path) from None
    finally:
        os.close(fd)


def regular_size_at(dir_fd: int, name: str) -> int | None:
    """The size of the regular file ``name`` in the directory ``dir_fd`` (a link is not
    followed), else None."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def remove_stale_parts(dir_fd: int, own: Callable[[str], bool]) -> int:
    """Remove the temporary files ``write_file_at`` leaves only when its process was killed
    outright: ``.{name}.part-{pid}``, a regular file, ``own(name)`` (a name the caller
    writes, so nobody else's file that merely looks alike), and no process ``pid`` alive here
    (so not another run writing into the same directory now). A rerun starts clean. Returns
    how many."""
    removed = 0
    for entry in os.listdir(dir_fd):
        if not entry.startswith(".") or PART_SUFFIX not in entry[1:]:
            continue
        name, pid = entry[1:].rsplit(PART_SUFFIX, 1)
        if not (pid.isdigit() and own(name)) or _alive(int(pid)):
            continue
        if regular_size_at(dir_fd, entry) is not None:
            os.unlink(entry, dir_fd=dir_fd)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (one of another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):   # gone, or no pid at all
        return False
    except PermissionError:
        return True
    return pid > 0


def _kind_in_the_way(dir_fd: int, name: str) -> str | None:
    """What stands at ``name`` that a write must not replace ("a symbolic link", ...), or
    None when nothing or a regular file does."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


@contextmanager
def file_at(dir_fd: int, name: str, directory: PathArg | None = None, *, mode: int = 0o644,
            durable: bool = False) -> Iterator[BinaryIO]:
    """A file ``name`` in the directory ``dir_fd``, streamed and then put in place whole: the
    ``with`` block writes into a fresh temporary file (O_EXCL, O_NOFOLLOW, ``mode``), renamed
    over ``name`` only when the block ends normally; any exception (an interrupt included)
    removes it, so no partial file is ever left. Only a regular file (or no file) at ``name``
    is replaced: a link, device, FIFO or directory there is a LedgerError, checked before and
    again just before the rename. ``durable`` fsyncs the file before the rename and the
    directory after it. ``directory`` (the path ``dir_fd`` was opened from) only names the
    file in an error."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    shown = os.path.join(os.fspath(directory), name) if directory is not None else name
    kind = _kind_in_the_way(dir_fd, name)
    if kind is not None:
        raise LedgerError(f"the output file is {kind}; refusing to replace it", shown)
    tmp = part_name(name)
    try:
        # Inside the try: an interrupt landing just after the open still removes the file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        _keep_mode(dir_fd, name, fd)
        with open(fd, "wb", closefd=True) as out:
            yield out
            out.flush()
            if durable:
                os.fsync(fd)
        kind = _kind_in_the_way(dir_fd, name)
        if kind is not None:
            raise LedgerError(f"the output file became {kind} while it was written; not replaced", shown)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        if durable:
            os.fsync(dir_fd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        failed = _write_failed(exc, tmp, shown)
        if failed is exc:
            raise
        raise failed from None


def write_file_at(dir_fd: int, name: str, data: bytes | memoryview, directory: PathArg | None = None, *,
                  mode: int = 0o644, durable: bool = False) -> None:
    """Write ``data`` as ``name`` in the directory ``dir_fd``, whole or not at all
    (``file_at``'s rules)."""
    with file_at(dir_fd, name, directory, mode=mode, durable=durable) as out:
        out.write(data)


def prepare_output_dir(path: PathArg, what: str = "directory") -> Path:
    """Make sure the directory a command documents creating (``sample DIR``) can be written:
    the name checked, an existing directory used, a missing one created (that directory
    only). LedgerError naming the path otherwise. Returns the path."""
    os.close(open_output_dir(path, create=True))
    return Path(path)


__all__ = ["CAPSEM_FILES", "PART_SUFFIX", "SIDECARS", "STDOUT", "check_output_name", "exists_at", "file_at",
           "names_stdout", "open_output_dir", "output_stream", "part_name", "prepare_output_dir", "refuse_capsem_file",
           "regular_size_at", "remove_stale_parts", "write_file_at", "write_output"]
