"""_archive.ReadAhead (archive_ahead.c): a file handed to it ends up in the page cache, read in
file order from a descriptor the caller keeps (duplicated, never opened again), at most its
limit, passing over what the page cache holds already, and closing it stops and joins its
thread; the same whether it reads by sendfile or by advice alone (``advice``, its fallback).
The page cache is observed with mincore(2) on a map of the file, after the file's clean pages
were dropped with POSIX_FADV_DONTNEED. A page counts as brought in once it was seen in the
cache (``_Watch``): the kernel may reclaim a clean page at any moment after (DAMON's proactive
pageout does, on machines that run it), which undoes nothing the read-ahead did. Waits are
for a state, with a generous deadline, never for a time."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time
from pathlib import Path

import pytest

from capsem_core._native import _archive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise as Linux has them")

SIZE = 24 << 20
DEADLINE_S = 60.0


def _in_cache(path: Path) -> list[bool]:
    """Whether each of the file's pages is in the page cache now."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as m:
        pages = (len(m) + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(len(m)), vec) != 0:
            pytest.skip(f"mincore failed: {os.strerror(ctypes.get_errno())}")
        return [bool(v & 1) for v in vec]


def _resident(path: Path) -> float:
    """The share of the file's pages in the page cache now."""
    now = _in_cache(path)
    return sum(now) / len(now)


class _Watch:
    """The file's pages seen in the page cache at any look since the watch began."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = [False] * len(_in_cache(path))

    def share(self) -> float:
        """Look again; the share of the pages seen so far."""
        self.seen = [a or b for a, b in zip(self.seen, _in_cache(self.path))]
        return sum(self.seen) / len(self.seen)


def _dropped(path: Path) -> None:
    """The file's pages out of the page cache (they are clean: written and synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture(params=[False, True], ids=["sendfile", "advice"])
def advice(request: pytest.FixtureRequest) -> bool:
    """Whether the read-ahead under test reads by WILLNEED advice alone."""
    return bool(request.param)


@pytest.fixture
def cold(tmp_path: Path) -> Path:
    path = tmp_path / "session.bodies"
    with open(path, "wb") as f:
        f.write(os.urandom(SIZE))
        f.flush()
        os.fsync(f.fileno())
    _dropped(path)
    if _resident(path) > 0.5:
        pytest.skip("the page cache keeps the file's pages here (POSIX_FADV_DONTNEED is only advice)")
    return path


def _until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_file_handed_to_a_read_ahead_ends_up_in_the_page_cache(cold: Path, advice: bool) -> None:
    watch = _Watch(cold)
    ahead = _archive.ReadAhead(1 << 40, advice_only=advice)
    fd = os.open(cold, os.O_RDONLY)
    try:
        ahead.add(fd, SIZE)
        _until(lambda: ahead.asked == SIZE and watch.share() == 1.0, "the file never came into the page cache")
    finally:
        ahead.close()
        os.close(fd)


def test_a_read_ahead_asks_for_no_more_than_its_limit(cold: Path, advice: bool) -> None:
    limit = _archive.READ_AHEAD_CHUNK
    watch = _Watch(cold)
    ahead = _archive.ReadAhead(limit, advice_only=advice)
    fd = os.open(cold, os.O_RDONLY)
    try:
        ahead.add(fd, SIZE)
        _until(lambda: ahead.asked == limit, "the first chunk was never asked for")
        _until(lambda: watch.share() * SIZE >= limit // 2, "the first chunk never came into the page cache")
        assert ahead.asked == limit
    finally:
        ahead.close()
        os.close(fd)
    # The kernel may read a little past what was asked (its own read-ahead), never the file.
    assert watch.share() < 0.5


def test_a_read_ahead_keeps_its_own_descriptor_and_closes_it(cold: Path, advice: bool) -> None:
    before = set(os.listdir("/proc/self/fd"))
    watch = _Watch(cold)
    ahead = _archive.ReadAhead(1 << 40, advice_only=advice)
    fd = os.open(cold, os.O_RDONLY)
    ahead.add(fd, SIZE)
    os.close(fd)   # the caller's own: the read-ahead reads through its duplicate
    _until(lambda: ahead.asked == SIZE and watch.share() == 1.0, "the file never came into the page cache")
    ahead.close()
    assert set(os.listdir("/proc/self/fd")) <= before


def _read(path: Path, start: int, length: int) -> None:
    """[start, start + length) of the file into the page cache and nothing past it (the
    kernel's own read-ahead is turned off for this open: a sequential read would have it
    bring in megabytes more)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        while length > 0:
            got = os.pread(fd, min(length, 1 << 20), start)
            assert got
            start += len(got)
            length -= len(got)
    finally:
        os.close(fd)


def _asked_through(path: Path, limit: int, why: str, advice: bool) -> int:
    """Hand the whole file to a read-ahead of ``limit`` bytes, wait until it has gone through
    it and the file is all in the page cache, and say how many bytes it asked for."""
    watch = _Watch(path)
    ahead = _archive.ReadAhead(limit, advice_only=advice)
    fd = os.open(path, os.O_RDONLY)
    try:
        ahead.add(fd, SIZE)
        _until(lambda: ahead.passed == SIZE and watch.share() == 1.0, why)
        return int(ahead.asked)
    finally:
        ahead.close()
        os.close(fd)


def _cached(path: Path, start: int, length: int) -> None:
    """Exactly [start, start + length) of the file in the page cache, else the test skipped."""
    _read(path, start, length)
    if round(_resident(path) * SIZE) != length:
        pytest.skip("the page cache here holds more or less than what was read")


def test_a_file_already_in_the_page_cache_is_passed_over_not_asked_for(cold: Path, advice: bool) -> None:
    _cached(cold, 0, SIZE)
    assert _asked_through(cold, 1 << 40, "the read-ahead never went through the file", advice) == 0


def test_cached_chunks_are_passed_over_even_beyond_the_limit(cold: Path, advice: bool) -> None:
    _cached(cold, 0, SIZE)
    # Room for no chunk at all, and none needs asking for.
    assert _asked_through(cold, 1, "the read-ahead stopped at its limit on cached chunks", advice) == 0


def test_only_the_chunks_missing_from_the_page_cache_are_asked_for(cold: Path, advice: bool) -> None:
    chunk = _archive.READ_AHEAD_CHUNK
    _cached(cold, 0, 2 * chunk)   # the first two chunks cached, the rest not
    # A limit of the missing chunks alone: cached ones count nothing against it.
    assert _asked_through(cold, SIZE - 2 * chunk, "the missing chunks never came in", advice) == SIZE - 2 * chunk


def test_from_the_first_missing_chunk_on_the_file_is_streamed_as_a_cold_one(cold: Path, advice: bool) -> None:
    chunk = _archive.READ_AHEAD_CHUNK
    _cached(cold, chunk, SIZE - chunk)   # everything but the first chunk cached
    assert _asked_through(cold, 1 << 40, "the first chunk never came in", advice) == SIZE


def test_a_file_shorter_than_its_size_said_is_read_to_its_end_and_passed(cold: Path, advice: bool) -> None:
    # A ledger cut short between the size's reading and the stream: the end of the file ends
    # each chunk's read, nothing waits on bytes that are not there.
    watch = _Watch(cold)
    ahead = _archive.ReadAhead(1 << 40, advice_only=advice)
    fd = os.open(cold, os.O_RDONLY)
    try:
        ahead.add(fd, 2 * SIZE)
        _until(lambda: ahead.passed == 2 * SIZE and watch.share() == 1.0, "the read-ahead stalled past the end")
    finally:
        ahead.close()
        os.close(fd)


def test_a_closed_descriptor_or_a_closed_read_ahead_is_refused(cold: Path, advice: bool) -> None:
    ahead = _archive.ReadAhead(1 << 40, advice_only=advice)
    fd = os.open(cold, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError):
        ahead.add(fd, SIZE)
    ahead.close()
    with pytest.raises(ValueError, match="closed"):
        ahead.add(0, 1)
    ahead.close()   # twice: nothing more to stop
