"""WARC records into gzip members by libdeflate across a pthread pool (stub of the compiled
module)."""

import numpy as np
import numpy.typing as npt

Buffer = bytes | bytearray | memoryview | npt.NDArray[np.uint8]

MAX_LEVEL: int
MAX_THREADS: int
MAX_RECORD_BYTES: int

class GzipMembers:
    """A pool of ``threads`` workers, each with one libdeflate compressor at ``level``."""

    @property
    def level(self) -> int: ...
    @property
    def threads(self) -> int: ...

    def __init__(self, level: int = 6, threads: int = 1) -> None: ...
    def compress(self, heads: Buffer, head_offsets: npt.ArrayLike, bodies: Buffer, body_offsets: npt.ArrayLike,
                 body_lengths: npt.ArrayLike, trailer: Buffer = b"",
                 out: npt.NDArray[np.uint8] | None = None) -> tuple[npt.NDArray[np.uint8], int,
                                                                    npt.NDArray[np.int64]]: ...
