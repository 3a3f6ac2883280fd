"""An exception at any step of the write path never leaves an index row naming bytes not on disk.

Each case writes a ledger through ``LedgerWriter`` and makes exactly one call of the write path
raise: the compressor's ``compress`` / ``flush`` (before it runs, or after it consumed its
input), ``os.write`` (the whole record, or after writing half of it), ``os.fdatasync``, the
segment and block header packers, and each SQLite statement of the flush transaction (BEGIN,
the ``body_blocks`` upsert, the body rows, the ledger rows, COMMIT - before or after the
statement ran). The raised exception is KeyboardInterrupt (what Ctrl-C raises, a
BaseException) or a plain RuntimeError; the case then leaves the writer the way a program does
(``close()``, as ``with`` would). The cases cover both codecs, blocks that stay open and blocks
that close mid-run, bodies deduplicated against committed and against staged bodies, and
automatic flushes whose sync and commit run on the background thread.

After each case: the exception came out unchanged; every committed index row reads back the
bytes that were written for it (independent oracle, Ledger API, verify kernel);
``check --verify-bodies`` is sound; a new writer on the ledger appends bodies that verify.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

from oracles import archive_reader as oracle
import pytest
from tests.reliability_helpers import net_row

from capsem_core import format as fmt
from capsem_core.writer import BodyArchiveWriter
from capsem_core.check import check_ledger
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter


class Injected(RuntimeError):
    pass


class Trap:
    """Counts the calls of one site and raises on the ``at``-th one (once)."""

    def __init__(self, site: str, at: int, exc: type[BaseException], after: bool) -> None:
        self.site, self.at, self.exc, self.after = site, at, exc, after
        self.hits = 0
        self.fired = False

    def hit(self, site: str) -> bool:
        if site != self.site or self.fired:
            return False
        self.hits += 1
        if self.hits == self.at:
            self.fired = True
            return True
        return False

    def make(self) -> BaseException:
        return self.exc(f"injected at {self.site} #{self.at}") if self.exc is not KeyboardInterrupt \
            else KeyboardInterrupt(f"injected at {self.site} #{self.at}")


class TrappedCompressor:
    def __init__(self, real: object, trap: Trap) -> None:
        self._real, self._trap = real, trap

    def _call(self, site: str, name: str, *args: object) -> bytes:
        fire = self._trap.hit(site)
        if fire and not self._trap.after:
            raise self._trap.make()
        out = getattr(self._real, name)(*args)
        if fire:
            raise self._trap.make()  # the input was consumed: the stream moved on
        return out

    def compress(self, data: bytes) -> bytes:
        return self._call("compress", "compress", data)

    def flush(self, mode: int) -> bytes:
        return self._call("flush", "flush", mode)


class TrappedConnection:
    """The writer's SQLite connection, raising around one kind of statement."""

    KINDS = (("begin", "BEGIN"), ("upsert", "INSERT INTO body_blocks"),
             ("bodies", "INSERT OR REPLACE INTO event_body_blobs"), ("rows", "INSERT INTO net_events"),
             ("commit", "COMMIT"))

    def __init__(self, real: sqlite3.Connection, trap: Trap) -> None:
        self._real, self._trap = real, trap

    def _kind(self, sql: str) -> str | None:
        for kind, prefix in self.KINDS:
            if sql.startswith(prefix):
                return kind
        return None

    def _run(self, method: str, sql: str, *args: object) -> object:
        kind = self._kind(sql)
        fire = kind is not None and self._trap.hit(kind)
        if fire and not self._trap.after:
            raise self._trap.make()
        out = getattr(self._real, method)(sql, *args)
        if fire:
            raise self._trap.make()
        return out

    def execute(self, sql: str, *args: object) -> object:
        return self._run("execute", sql, *args)

    def executemany(self, sql: str, *args: object) -> object:
        return self._run("executemany", sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def body_for(i: int, big: bool) -> bytes:
    r = random.Random(i)
    roll = r.random()
    if big and i == 9:
        return b"a large compressible body crossing the 1 MiB block target " * 19_000
    if roll < 0.25:
        return r.randbytes(r.randrange(600, 6_000))
    if roll < 0.5:
        return b"the same body, again and again (dedup) " * 30
    return (f"body {i} " * r.randrange(1, 300)).encode()


def install(monkeypatch: pytest.MonkeyPatch, trap: Trap, writers: list[LedgerWriter]) -> None:
    real_new = BodyArchiveWriter._new_compressor
    monkeypatch.setattr(BodyArchiveWriter, "_new_compressor",
                        lambda self: TrappedCompressor(real_new(self), trap))
    real_write, real_sync = os.write, os.fdatasync

    def archive_fds() -> set[int]:
        return {w.archive._fd for w in writers if w.archive is not None}

    def write(fd: int, data: bytes) -> int:
        if fd in archive_fds():
            site = "partial-write" if trap.site == "partial-write" else "write"
            if trap.hit(site):
                if site == "partial-write":
                    real_write(fd, bytes(data[:max(1, len(data) // 2)]))
                raise trap.make()
        return real_write(fd, data)

    def fdatasync(fd: int) -> None:
        if fd in archive_fds():
            fire = trap.hit("fdatasync")
            if fire and not trap.after:
                raise trap.make()
            real_sync(fd)
            if fire:
                raise trap.make()
            return
        real_sync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    for name, site in (("pack_segment_header", "segment-header"), ("pack_block_header", "block-header")):
        real = getattr(fmt, name)

        def packer(*args: object, _real=real, _site=site) -> bytes:
            if trap.hit(_site):
                raise trap.make()
            return _real(*args)

        monkeypatch.setattr(fmt, name, packer)


def write_case(directory: Path, trap: Trap, codec: str, background: bool, closing: bool,
               monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, bytes], BaseException | None]:
    """Write 30 bodies (10 committed first), with the trap armed; leave like a program would."""
    written: dict[str, bytes] = {}
    writers: list[LedgerWriter] = []
    install(monkeypatch, trap, writers)
    caught: BaseException | None = None
    writer = LedgerWriter(directory, codec=codec, flush_rows=4 if background else 50_000,
                          close_every_flush=closing)
    writers.append(writer)
    try:
        writer._conn = TrappedConnection(writer._conn, trap)  # noqa: SLF001 - the seam under test
        try:
            for i in range(30):
                eid = f"{i:012x}"
                data = body_for(i, closing)
                written[eid] = data
                # Every fifth body repeats one already committed or staged (dedup hits).
                bodies = [Body("request", data, "http.request")]
                if i % 5 == 4:
                    bodies.append(Body("response", written[f"{i - 3:012x}"], "http.request"))
                writer.insert("net_events", net_row(eid), bodies)
                if i % 7 == 6:
                    writer.flush()
        except (KeyboardInterrupt, Injected) as e:
            caught = e
        try:
            writer.close()
        except (KeyboardInterrupt, Injected) as e:
            assert caught is None or e is caught, (caught, e)
            caught = caught or e
    finally:
        monkeypatch.undo()
        if not writer.closed:
            writer._release()  # noqa: SLF001 - a failed test must not leave the lock held
    return written, caught


def assert_sound(directory: Path, written: dict[str, bytes]) -> int:
    db = directory / "session.db"
    oracle.check_index_extents(db)
    bodies = oracle.archived_bodies(db)
    for b in bodies:
        want = written[b.event_id] if b.direction == "request" else written[f"{int(b.event_id, 16) - 3:012x}"]
        assert b.data == want, (b.event_id, b.direction)
    with Ledger(directory) as ledger:
        for b in bodies:
            assert ledger.read_body(b.event_id, "net_events", b.direction) == b.data
        verified, findings = ledger.verify()
        assert not findings and verified == len(bodies), findings[:3]
    report = check_ledger(db, verify_bodies=True)
    assert report.sound and report.exit_code() == 0, [
        (c.name, [f.message for f in c.findings]) for c in report.checks.values() if c.findings]
    return len(bodies)


def assert_reopens(directory: Path, codec: str) -> None:
    data = b"written by the next writer " * 40
    with LedgerWriter(directory, codec=codec) as writer:
        assert writer.archive_out_of_service is None, writer.archive_out_of_service
        writer.insert("net_events", net_row("f" * 12), [Body("request", data, "http.request")])
    assert oracle.read_body(directory / "session.db", "f" * 12, "net_events", "request") == data
    with Ledger(directory) as ledger:
        verified, findings = ledger.verify()
        assert not findings


# Retiring the archive after an injected failure warns; that is expected here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SITES = ("compress", "flush", "write", "partial-write", "fdatasync", "segment-header", "block-header",
         "begin", "upsert", "bodies", "rows", "commit")
# Sites where "after the real call" differs from "instead of it".
AFTER_SITES = {"compress", "flush", "fdatasync", "begin", "upsert", "bodies", "rows", "commit"}


def count_hits(tmp_path: Path, codec: str, background: bool, closing: bool, monkeypatch) -> dict[str, int]:
    """How often each site is called in a run with nothing injected."""
    counts: dict[str, int] = {}
    for site in SITES:
        trap = Trap(site, 0, Injected, False)  # at=0: never fires, only counts
        written, caught = write_case(tmp_path / f"count-{site}", trap, codec, background, closing, monkeypatch)
        assert caught is None
        counts[site] = trap.hits
    return counts


@pytest.mark.parametrize("closing", [False, True], ids=["blocks-stay-open", "blocks-close"])
@pytest.mark.parametrize("background", [False, True], ids=["flush", "background-flush"])
@pytest.mark.parametrize("codec", ["deflate", "zstd"])
def test_an_exception_at_any_step_of_the_write_path_leaves_a_sound_ledger(tmp_path, monkeypatch, codec,
                                                                          background, closing):
    counts = count_hits(tmp_path, codec, background, closing, monkeypatch)
    assert all(counts[s] > 0 for s in SITES), counts
    rng = random.Random(f"{codec}{background}{closing}")
    cases = 0
    for site in SITES:
        n = counts[site]
        # The first call, the last one (the exit path: close's FINAL segment, sync, commit) and,
        # for KeyboardInterrupt, one between.
        middle = rng.randint(1, n)
        for at in sorted({1, n, middle}):
            for exc in ((KeyboardInterrupt, Injected) if at in (1, n) else (KeyboardInterrupt,)):
                for after in ((False, True) if site in AFTER_SITES else (False,)):
                    directory = tmp_path / f"{site}-{at}-{exc.__name__}-{after}"
                    trap = Trap(site, at, exc, after)
                    written, caught = write_case(directory, trap, codec, background, closing, monkeypatch)
                    where = f"{site} #{at}/{n} {exc.__name__} {'after' if after else 'instead of'} the call"
                    assert trap.fired, where
                    assert isinstance(caught, exc), (where, caught)
                    try:
                        assert_sound(directory, written)
                        assert_reopens(directory, codec)
                    except AssertionError as e:
                        raise AssertionError(f"{where}: {e}") from e
                    cases += 1
    print(f"\n{cases} injected exceptions, each left a sound ledger that reopens")
