"""session.bodies in C: bounded header parsing, the block-cursor reader and the verify kernel
(stub of the compiled module)."""

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from capsem_core.errors import ArchiveError

FILE_MAGIC: bytes
BLOCK_MAGIC: bytes
SEGMENT_MAGIC: bytes
SYNC_FLUSH_TAIL: bytes
FORMAT_VERSION: int
FILE_HEADER_BYTES: int
BLOCK_HEADER_BYTES: int
SEGMENT_HEADER_BYTES: int
SEGMENT_FINAL: int
MAX_BLOCK_RAW_BYTES: int
MAX_SEGMENT_EXPANSION: int
CODEC_DEFLATE: int
CODEC_ZSTD: int
BODY_HASH_PREFIX: str
LIMITS: dict[str, int]

def check_file_header(head: bytes, path: os.PathLike[str] | str | None = None) -> None: ...
def parse_block_header(head: bytes, block_offset: int, path: os.PathLike[str] | str | None = None) -> int: ...
def parse_segment_header(head: bytes, at: int, expected_raw_start: int,
                         path: os.PathLike[str] | str | None = None) -> tuple[int, int, int, int, bytes]: ...

class ArchiveFault(NamedTuple):
    code: int
    kind: str
    at: int
    text: str

class VerifyOutcome(NamedTuple):
    status: npt.NDArray[np.uint8]
    err_index: npt.NDArray[np.int32]
    got: npt.NDArray[np.uint8]
    errors: list[ArchiveFault]

MAX_CACHED_BLOCKS: int

class ExtentWalk:
    """Per extent: raw_len and segment count (0 when it failed), the failures as (position,
    ArchiveError), the sound extents holding an empty segment that is not what an empty
    segment is (position, its offset, how many), and the parsed segment headers, kept
    natively for the verify kernel."""
    @property
    def block_offset(self) -> npt.NDArray[np.int64]: ...
    @property
    def raw_len(self) -> npt.NDArray[np.int64]: ...
    @property
    def segments(self) -> npt.NDArray[np.int64]: ...
    @property
    def seg_first(self) -> npt.NDArray[np.int64]: ...
    @property
    def failures(self) -> list[tuple[int, ArchiveError]]: ...
    @property
    def empty_faults(self) -> list[tuple[int, int, int]]: ...
    @property
    def segment_count(self) -> int: ...
    def rules_settled(self) -> int: ...

class ArchiveReader:
    @property
    def path(self) -> Path: ...
    def __init__(self, path: os.PathLike[str] | str, cache_bytes: int = 0, *, use_libdeflate: bool = True) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> ArchiveReader: ...
    def __exit__(self, *exc: object) -> None: ...
    def read(self, block_offset: int, offset: int, length: int) -> bytes: ...
    def read_verified(self, block_offset: int, offset: int, length: int, expected: bytes | str,
                      subject: object = None) -> bytes: ...
    def walk_extent(self, block_offset: int, disk_len: int) -> tuple[int, int, int, bool]: ...
    def walk_extents(self, block_offsets: npt.ArrayLike, disk_lens: npt.ArrayLike, *, rules: bool = False) -> ExtentWalk: ...
    def file_was_replaced(self) -> bool: ...
    def fileno(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def blocks_inflated(self) -> int: ...
    @property
    def segments_inflated(self) -> int: ...
    @property
    def verified_reads(self) -> tuple[int, int]: ...
    @property
    def remembered_segments(self) -> int: ...
    @property
    def held_bytes(self) -> int: ...
    @property
    def cached_blocks(self) -> int: ...
    @property
    def cache_bytes(self) -> int: ...
    @property
    def uses_libdeflate(self) -> bool: ...
    @property
    def identity(self) -> tuple[int, int]: ...

class ReadOnlyBytes:
    def __init__(self, array: Any) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def verify_bodies(bodies_path: os.PathLike[str] | str, blocks: Mapping[str, Any], bodies: Mapping[str, Any],
                  threads: int = 0, progress: Callable[[int, int], None] | None = None,
                  use_libdeflate: bool = True) -> VerifyOutcome: ...
def verify_bodies_with(reader: ArchiveReader, blocks: Mapping[str, Any], bodies: Mapping[str, Any],
                       threads: int = 0, progress: Callable[[int, int], None] | None = None,
                       use_libdeflate: bool = True, walk: ExtentWalk | None = None, out: Any = None,
                       out_offset: npt.NDArray[np.int64] | None = None,
                       buffers: KernelBuffers | None = None) -> VerifyOutcome: ...

def verify_bodies_into_bytes(reader: ArchiveReader, blocks: Mapping[str, Any], bodies: Mapping[str, Any],
                             threads: int = 0, use_libdeflate: bool = True,
                             buffers: KernelBuffers | None = None) -> tuple[VerifyOutcome, list[bytes | None]]: ...

class KernelBuffers:
    """Working buffers lent to kernel run after kernel run (a bulk read in batches)."""
    def __init__(self) -> None: ...

EXTENT_HASHED: int
EXTENT_PAST_END: int
EXTENT_SHRANK: int
EXTENT_UNCHAINED: int

class ExtentPrints(NamedTuple):
    disk_hash: npt.NDArray[np.uint8]
    segments: npt.NDArray[np.uint8]
    status: npt.NDArray[np.uint8]

def hash_extents(reader: ArchiveReader, offsets: npt.ArrayLike, lengths: npt.ArrayLike,
                 threads: int = 0) -> ExtentPrints: ...

READ_AHEAD_CHUNK: int

class ReadAhead:
    """One thread reading files into the page cache ahead of their readers, in file order, at
    most ``limit`` bytes in all (by sendfile on Linux; by WILLNEED advice elsewhere or with
    ``advice_only``); ``add`` takes a descriptor the caller keeps open, and a
    ``_pages.StreamGate``'s capsule to advance as it reads that file."""
    def __init__(self, limit: int, advice_only: bool = False) -> None: ...
    def add(self, fd: int, size: int, gate: object | None = None) -> None: ...
    @property
    def asked(self) -> int: ...
    @property
    def passed(self) -> int: ...
    def close(self) -> None: ...
