"""The session.db page map (stub of the compiled module): the whole-file half of a page
check, read from the file's own bytes. capsem_core.check.pages runs it."""

from collections.abc import Sequence
from os import PathLike
from typing import Any, NamedTuple

MAX_FINDINGS: int
MAX_DEPTH: int
KINDS: dict[int, str]

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

class PageFile:
    path: str
    def __init__(self, path: str | PathLike[str]) -> None: ...
    @property
    def size(self) -> int: ...
    def header(self) -> dict[str, Any] | None: ...
    def estimate(self, roots: Sequence[int]) -> list[int]: ...
    def walk(self, roots: Sequence[int]) -> Walk: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...
