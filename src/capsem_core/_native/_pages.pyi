"""The session.db page map (stub of the compiled module): the whole-file half of a page
check, and chosen columns of a table's rows, read from the file's own bytes.
capsem_core.pages.check runs the walk; capsem_core.pages.graph and capsem_core.pages.index
the row scans."""

from collections.abc import Sequence
from os import PathLike
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

MAX_FINDINGS: int
MAX_DEPTH: int
# The bytes of the map one walk or scan keeps resident by default.
WINDOW_BYTES: int
KINDS: dict[int, str]
# records(): the column that is the rowid, an integer column's NULL, columns per scan.
ROWID: int
NULL_VALUE: int
MAX_COLUMNS: int
MAX_TREES: int
# records(): the column kinds besides an integer (None) and a Codes.
TEXT: str
DIGEST: str
HEX: str

class Records(NamedTuple):
    status: str   # "ok", "cancelled", "unreadable", "gave_up", "shrank"
    rows: int
    values: list[npt.NDArray[np.int64]]
    odd: list[int]
    data: list[npt.NDArray[np.uint8] | None]   # TEXT: bytes end to end; DIGEST: (rows, 32)

def missing_sorted(held: npt.NDArray[np.int64], wanted: npt.NDArray[np.int64]) -> int:
    """How many values of ``wanted`` ``held`` lacks, both sorted ascending."""

def runs(first: npt.NDArray[np.int64],
         second: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The rows that begin a run of equal (first, second) pairs: their values, in order."""

class Codes:
    """Dense codes (1, 2, ...) of the distinct texts the scans sharing it meet."""
    def __init__(self, seed: int) -> None: ...
    def __len__(self) -> int: ...
    def find(self, text: str | bytes) -> int: ...
    def adopt(self, other: Codes) -> npt.NDArray[np.int64] | None: ...
    def text(self, code: int) -> bytes | None: ...

class Finding(NamedTuple):
    kind: str
    in_tree: bool
    page: int
    tree: int
    source: int
    a: int
    b: int

class Walk(NamedTuple):
    findings: list[Finding]
    findings_total: int
    in_tree_total: int
    tree_pages: list[int]
    btree_pages: int
    overflow_pages: int
    freelist_pages: int
    pointer_map_pages: int
    cancelled: bool
    sound: list[bool]

class StreamGate:
    """How far a read-ahead has read a file: advanced and closed by the read-ahead, followed
    by a ``PageFile``'s scans (``PageFile.follow``)."""
    def __init__(self) -> None: ...
    def advance(self, passed: int) -> None: ...
    def close(self) -> None: ...
    @property
    def passed(self) -> int: ...
    @property
    def open(self) -> bool: ...
    @property
    def waits(self) -> int: ...
    def capsule(self) -> object: ...

class PageFile:
    """session.db mapped read-only; each walk or scan keeps ``window`` bytes of it resident
    (``WINDOW_BYTES`` by default, 0: no bound)."""
    @property
    def path(self) -> str: ...
    @property
    def window(self) -> int: ...
    def __init__(self, path: str | PathLike[str], window: int | None = None) -> None: ...
    @property
    def size(self) -> int: ...
    def fileno(self) -> int: ...
    def header(self) -> dict[str, Any] | None: ...
    def estimate(self, roots: Sequence[int]) -> list[int]: ...
    def walk(self, roots: Sequence[int],
             rules: Sequence[tuple[int, int, int, int, int] | None] | None = None) -> Walk:
        """The page map of ``roots``; with ``rules`` (per root: fields, not_null, null,
        no_number, no_text; None for no judgement), ``Walk.sound`` says which trees passed
        every test of SQLite's per-table quick_check."""
    def records(self, root: int, columns: Sequence[tuple[int, Codes | str | None]]) -> Records: ...
    def records_of(self, trees: Sequence[tuple[int, Sequence[tuple[int, Codes | str | None]]]]) -> list[Records]: ...
    def follow(self, gate: StreamGate | None) -> None: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...
