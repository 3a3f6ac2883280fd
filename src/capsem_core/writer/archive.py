"""Appending to one ``session.bodies`` file (archive format version 2): ``BodyArchiveWriter``.

It opens or creates the file, stages bodies for the open block, cuts segments (one ``write``
each: block header when first, segment header, payload), closes blocks with a FINAL segment
and syncs. It never continues a block it did not open.

Exit paths. Any exception, KeyboardInterrupt and SystemExit included, raised between the
moment a segment's compressor is touched and the moment its record is completely appended
poisons the writer: the compressor's stream state and the file's tail can no longer be
vouched for, so no further segment is produced, ``end`` stays at the last complete record and
whatever part of the record reached the file is an unreferenced tail (as after kill -9). The
exception is re-raised unchanged. ``last_written`` names the last complete record, which an
owner uses to reconcile its bookkeeping after an interrupt. An interrupted ``sync`` does not
poison: the bytes are whole, only their durability is unknown, and the owner commits no row
naming them until a later ``sync`` returns.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import warnings
import zlib
from pathlib import Path
from typing import NamedTuple, Protocol

import zstandard

from capsem_core import format as fmt
from capsem_core._native import _archive
from capsem_core._native._blake3 import digest as _blake3_digest
from capsem_core.format import (
    CODEC_DEFLATE,
    CODEC_NAMES,
    CODEC_ZSTD,
    DEFLATE_LEVEL,
    FILE_HEADER_BYTES,
    MAX_BLOCK_RAW_BYTES,
    MAX_SEGMENT_EXPANSION,
    SYNC_FLUSH_TAIL,
    TARGET_BLOCK_BYTES,
    ZSTD_LEVEL,
)
from capsem_core.errors import BlockFull, BodyTooLarge, LedgerError, SymlinkRefused, WriterPoisoned
from capsem_core.outputs import write_file_at
from capsem_core.paths import SESSION_BODIES, refuse_symlink

__all__ = ["BodyArchiveWriter", "SegmentWritten", "ZSTD_WINDOW_LOG", "codec_id"]

# zstd window of codec 2 blocks: 2 MiB (what level 3 picks for an unknown size), pinned so
# readers can bound their decoder memory whatever level a later build chooses.
ZSTD_WINDOW_LOG = 21


def codec_id(codec: str | int) -> int:
    """The block codec byte for ``codec`` ("deflate"/1 or "zstd"/2)."""
    if isinstance(codec, int) and codec in CODEC_NAMES:
        return codec
    for number, name in CODEC_NAMES.items():
        if codec == name:
            return number
    raise ValueError(f"unknown body codec {codec!r}: use 'deflate' (Capsem's) or 'zstd'")


def _sync_data(fd: int) -> None:
    """The archive's bytes and length on stable storage: fdatasync where the system has it
    (Linux); on macOS, which has none, F_FULLFSYNC (its fsync leaves data in the drive's
    cache); elsewhere fsync."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    elif hasattr(fcntl, "F_FULLFSYNC"):
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
    else:
        os.fsync(fd)


class SegmentWritten(NamedTuple):
    """What one appended segment made of its block: cumulative raw and on-disk lengths."""

    block_offset: int
    raw_len: int
    disk_len: int
    closed: bool


class Compressor(Protocol):
    """What a block's stream compressor offers (zlib's compressobj and zstandard's alike)."""

    def compress(self, data: bytes, /) -> bytes: ...

    def flush(self, mode: int, /) -> bytes: ...


def _zstd_compressor() -> zstandard.ZstdCompressor:
    params = zstandard.ZstdCompressionParameters.from_level(
        ZSTD_LEVEL, window_log=ZSTD_WINDOW_LOG, write_checksum=0, write_content_size=0, write_dict_id=0)
    return zstandard.ZstdCompressor(compression_params=params)


def _create_whole(path: Path) -> None:
    """Make the absent archive ``path`` holding its file header, in one step, through the
    output-path policy's per-file rule (a temporary renamed in once whole, removed however
    this ends): an interrupt leaves no archive or a whole one, never the empty file a reader
    would call damaged until a writer repaired it. The writer's lock is held, so nothing else
    makes the name meanwhile."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise LedgerError(f"io: cannot create the body archive: {e.strerror or e}", path) from e
    try:
        write_file_at(dir_fd, path.name, fmt.pack_file_header(), path.parent, mode=0o600)
    finally:
        os.close(dir_fd)


class BodyArchiveWriter:
    """Appends blocks of bodies to one ``session.bodies`` file (Capsem's ``BodyLogWriter``).

    ``stage`` hands out the final reference of a body at once, but the bytes reach the file
    only at ``flush_segment`` / ``close_block`` and are durable only after ``sync``; an owner
    must not publish a reference before both. Not thread-safe; one writer per file (the
    ledger's writer lock guarantees it).
    """

    def __init__(self, path: os.PathLike[str] | str, *, codec: str | int = "deflate") -> None:
        self._path = Path(path)
        self._codec = codec_id(codec)
        self._fd = -1
        self._poisoned = False
        self.last_written: SegmentWritten | None = None  # the last complete record appended
        self._zstd = _zstd_compressor() if self._codec == CODEC_ZSTD else None
        if self._codec == CODEC_DEFLATE:
            self._sync_mode, self._finish_mode = zlib.Z_SYNC_FLUSH, zlib.Z_FINISH
        else:
            self._sync_mode = zstandard.COMPRESSOBJ_FLUSH_BLOCK
            self._finish_mode = zstandard.COMPRESSOBJ_FLUSH_FINISH
        self._forget_block()
        self._end = self._open()

    # --- open ---------------------------------------------------------------------------

    def _open(self) -> int:
        path = self._path
        refuse_symlink(path, SESSION_BODIES, message=f"archive path is a symlink: {path}")
        if not os.path.lexists(path):
            _create_whole(path)
        flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                 | os.O_NONBLOCK)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            if e.errno == errno.ELOOP:
                # Swapped for a symlink between lstat and open.
                raise SymlinkRefused(f"archive path is a symlink: {path}", path) from e
            raise LedgerError(f"io: cannot open the body archive: {e.strerror}", path) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise LedgerError("io: the body archive is not a regular file", path)
            if st.st_size == 0:
                self._fd = fd
                self._append(fmt.pack_file_header(), at=0)
                return FILE_HEADER_BYTES
            os.fchmod(fd, 0o600)
            head = os.pread(fd, FILE_HEADER_BYTES, 0)
            _archive.check_file_header(head, path)
        except BaseException:
            self._fd = -1
            os.close(fd)
            raise
        self._fd = fd
        # The end is the file length, torn tail included: the next block starts after
        # whatever is there, never inside or in continuation of an old block.
        return st.st_size

    # --- state --------------------------------------------------------------------------

    def _forget_block(self) -> None:
        self._block_offset = -1
        self._comp: Compressor | None = None
        self._block_raw = 0          # raw bytes staged into the open block
        self._written_raw = 0        # raw bytes of the open block already in segments
        self._block_disk = 0         # on-disk bytes of the open block already written
        self._pending: list[bytes] = []   # raw bytes staged since the last segment

    @property
    def path(self) -> Path:
        return self._path

    @property
    def codec(self) -> int:
        return self._codec

    @property
    def end(self) -> int:
        """Where the next appended byte lands: the end of everything this writer vouches for."""
        return self._end

    @property
    def poisoned(self) -> bool:
        return self._poisoned

    @property
    def closed(self) -> bool:
        return self._fd < 0

    @property
    def block_offset(self) -> int | None:
        """File offset of the open block, or None when no block is open."""
        return None if self._block_offset < 0 else self._block_offset

    @property
    def wants_close(self) -> bool:
        """The open block has reached the 1 MiB target and should be closed."""
        return self._block_raw >= TARGET_BLOCK_BYTES

    # --- writing ------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._poisoned:
            raise WriterPoisoned("archive writer is poisoned by an earlier failed or interrupted append", self._path)
        if self._fd < 0:
            raise LedgerError("the archive writer is closed", self._path)

    def _poison(self, why: str, cause: BaseException | None = None) -> WriterPoisoned:
        self._poisoned = True
        error = WriterPoisoned(f"archive writer is poisoned: {why}", self._path)
        error.__cause__ = cause
        return error

    def stage(self, body: bytes) -> tuple[int, int, int]:
        """Feed ``body`` to the open block (opening one at ``end`` if none) and name its span.

        Returns ``(block_offset, offset, len)``. Raises BodyTooLarge above 16 MiB and
        BlockFull when the open block cannot take the body (close it and stage again).
        """
        if self._poisoned or self._fd < 0:
            self._check_usable()
        size = len(body)
        if size > MAX_BLOCK_RAW_BYTES:
            raise BodyTooLarge(f"body of {size} bytes exceeds the {MAX_BLOCK_RAW_BYTES}-byte block ceiling",
                               self._path)
        if self._block_offset < 0:
            self._comp = self._new_compressor()
            self._block_offset = self._end
        elif self._block_raw + size > MAX_BLOCK_RAW_BYTES:
            raise BlockFull("open block is full; close it and stage this body again", self._path)
        offset = self._block_raw
        if size:
            if type(body) is not bytes:
                # The segment hash is taken at flush time: keep an immutable copy.
                body = bytes(body)
            # Compression waits for the segment cut: one compressor call per segment, the
            # same stream as one call per body, at a fraction of the per-call cost.
            try:
                self._pending.append(body)
                self._block_raw = offset + size
            except BaseException:
                # Interrupted between the two: pending bytes and offsets may disagree.
                self._poisoned = True
                raise
        return self._block_offset, offset, size

    def flush_segment(self) -> SegmentWritten | None:
        """Write the bodies staged since the last segment as one sync-flushed segment."""
        self._check_usable()
        if self._block_offset < 0 or self._block_raw == self._written_raw:
            return None
        return self._write_segment(final=False)

    def close_block(self) -> SegmentWritten | None:
        """End the open block with a FINAL segment carrying whatever is pending (maybe nothing)."""
        self._check_usable()
        if self._block_offset < 0:
            return None
        return self._write_segment(final=True)

    def _new_compressor(self) -> Compressor:
        """A fresh compressor for a new block (a seam the interrupt tests wrap)."""
        if self._zstd is None:
            return zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
        return self._zstd.compressobj()

    def _write_segment(self, final: bool) -> SegmentWritten:
        # From the first compressor call until the record is completely appended, any
        # exception (KeyboardInterrupt included) leaves the compressor's stream state and the
        # file's tail unknown: poison, so no later segment is cut from that stream and ``end``
        # stays at the last complete record. The exception itself goes on unchanged.
        try:
            pending = self._pending
            raw = pending[0] if len(pending) == 1 else b"".join(pending)
            raw_len = len(raw)
            comp = self._comp
            assert comp is not None  # stage opened the block
            try:
                payload = comp.compress(raw) + comp.flush(self._finish_mode if final else self._sync_mode)
            except (zlib.error, zstandard.ZstdError) as e:
                raise self._poison(f"the compressor failed: {e}", e) from e
            if len(payload) > raw_len + MAX_SEGMENT_EXPANSION or (
                    not final and self._codec == CODEC_DEFLATE and not payload.endswith(SYNC_FLUSH_TAIL)):
                raise self._poison(f"the compressor produced a {len(payload)}-byte segment for {raw_len} raw "
                                   "bytes that the format cannot carry")
            header = fmt.pack_segment_header(final, self._written_raw, raw_len, len(payload),
                                             _blake3_digest(raw))
            first = self._block_disk == 0
            record = (fmt.pack_block_header(self._codec) + header + payload if first
                      else header + payload)
            end, disk = self._end + len(record), self._block_disk + len(record)
            written_raw = self._written_raw + raw_len
            written = SegmentWritten(self._block_offset, written_raw, disk, final)
            self._append(record, at=self._end)
            # No call between these stores: the record is vouched for all at once.
            self._end, self._written_raw, self._block_disk, self.last_written = end, written_raw, disk, written
        except BaseException:
            self._poisoned = True
            raise
        if final:
            self._forget_block()
        else:
            pending.clear()
        return written

    def _append(self, record: bytes, at: int) -> None:
        """One write of ``record`` at the file's end; any failure poisons the writer."""
        view = memoryview(record)
        done = 0
        try:
            while done < len(record):
                n = os.write(self._fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "write wrote nothing")
                done += n
        except OSError as e:
            # Part of the record may be on disk; ``end`` stays where it was, so nothing this
            # writer hands out ever names those bytes.
            raise self._poison(f"appending {len(record)} bytes at offset {at} failed after {done} bytes: "
                               f"{e.strerror or e}", e) from e
        except BaseException:
            # Interrupted mid-record: the same, but the interrupt itself goes on.
            self._poisoned = True
            raise

    def sync(self) -> None:
        """fdatasync the archive: data and length, so index rows naming it may commit.

        Allowed on a poisoned writer (the complete records before the poison still need it).
        An interrupted sync proves nothing: the owner commits no row until one returns.
        """
        if self._fd < 0:
            raise LedgerError("the archive writer is closed", self._path)
        try:
            _sync_data(self._fd)
        except OSError as e:
            raise LedgerError(f"io: fdatasync of the body archive failed: {e.strerror or e}", self._path) from e

    def poison(self) -> None:
        """Refuse every later segment, keeping what the writer knows of the open block."""
        self._poisoned = True

    def abandon(self) -> None:
        """Poison deliberately (the owner failed): unflushed bodies are discarded."""
        self._poisoned = True
        self._forget_block()

    def close(self) -> None:
        """Release the file. Staged but unwritten bodies are lost: close the block first."""
        if self._fd >= 0 and not self._poisoned and self._block_raw > self._written_raw:
            # Capsem's debug assertion: an owner that drops staged bytes has a bug.
            warnings.warn(f"{self._path}: closing the archive writer drops "
                          f"{self._block_raw - self._written_raw} staged bytes never written", ResourceWarning,
                          stacklevel=2)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self) -> None:
        # Dropped without close(): the descriptor goes with the object, not with the process.
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            try:
                os.close(fd)
            except Exception:   # noqa: BLE001 - late in the interpreter's teardown, os may be gone
                pass

    def __enter__(self) -> BodyArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"BodyArchiveWriter({str(self._path)!r}, codec={CODEC_NAMES[self._codec]!r}, end={self._end}, "
                f"block_offset={self.block_offset}, poisoned={self._poisoned})")
