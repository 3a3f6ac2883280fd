"""Crash safety: a writer killed with SIGKILL at random points across its flush cycles.

A chain of short-lived writer processes (forked, so a child costs no interpreter start-up)
appends to one ledger; the parent kills each at a random moment (during open, staging, the
segment write, the fdatasync, the SQLite commit, or between flushes). The child reports each
flush through a pipe only after ``flush()`` returned. After every kill the parent opens the
ledger and checks: every reported body reads back exactly (zero committed bodies lost),
every indexed body reads back exactly (nothing half-committed), ``check --verify-bodies`` is
sound (zero false damage), every recorded extent lies in the file and ends on a segment
boundary (a torn tail is never referenced); then the next writer of the chain continues.

One chain never closes a block (Capsem without retention: each new writer opens a new block
after the torn tail); the other closes a block at every flush and also crosses the 1 MiB
target with large bodies. CAPSEM_CRASH_KILLS sets the number of kills per chain (scripts/soak
raises it).
"""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from oracles import archive_reader as oracle
import pytest
from tests.reliability_helpers import net_row, sample_bodies

from capsem_core.check import check_ledger
from capsem_core.errors import LedgerError
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

KILLS = int(os.environ.get("CAPSEM_CRASH_KILLS", "100"))
KILL_SEED = int(os.environ.get("CAPSEM_CRASH_SEED", "20261130"))
# A child lives this long at most before it is killed (it opens the ledger, then flushes
# every few milliseconds). scripts/sanitize raises it: under ASan a child starts far slower.
MAX_LIFE_S = float(os.environ.get("CAPSEM_CRASH_MAX_LIFE", "0.12"))
EVENTS_PER_FLUSH = 3
# The share of kills that wait for the child's first flush before the random delay.
KILLED_AFTER_A_FLUSH = 0.6
FIRST_FLUSH_LIMIT_S = 300.0


def body_for(generation: int, i: int, large: bool) -> bytes:
    """The deterministic body of event ``i`` of writer ``generation`` (the parent recomputes it)."""
    r = random.Random(generation * 1_000_003 + i)
    roll = r.random()
    if large and roll < 0.08:
        return r.randbytes(r.randrange(200_000, 420_000))  # incompressible: crosses 1 MiB soon
    if roll < 0.3:
        return r.randbytes(r.randrange(1, 3000))
    pool = sample_bodies()
    return pool[r.randrange(len(pool))] + str(i).encode()


def event_key(generation: int, i: int) -> str:
    return f"{generation:05x}{i:07x}"


def parse_key(event_id: str) -> tuple[int, int]:
    return int(event_id[:5], 16), int(event_id[5:], 16)


def _child(directory: Path, generation: int, closing: bool, wfd: int) -> None:
    """Write until killed; report ``<last event index>`` after each flush returned."""
    try:
        writer = LedgerWriter(directory, close_every_flush=closing, lock_timeout=5.0)
        i = 0
        while True:
            for _ in range(EVENTS_PER_FLUSH):
                eid = event_key(generation, i)
                writer.insert("net_events", net_row(eid),
                              bodies=[Body("request", body_for(generation, i, closing), "http.request")])
                i += 1
            writer.flush()
            os.write(wfd, f"{i - 1}\n".encode())
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test
        os.write(wfd, f"error {type(e).__name__}: {e}\n".encode())
        os._exit(3)


@dataclass
class Chain:
    directory: Path
    closing: bool
    generation: int = 0
    reported: dict[int, int] = field(default_factory=dict)   # generation -> last reported index
    verified_rows: set[int] = field(default_factory=set)      # rowids already read back
    kills: int = 0
    torn_tails: int = 0
    unreported_commits: int = 0
    early_kills: int = 0


def _first_report(rfd: int) -> bytes:
    """What the child wrote up to its first line: its first flush reported (or an error, or
    nothing when it died first). Blocks until then, however slow the machine is."""
    got = b""
    while b"\n" not in got:
        # A bound only a hung child reaches (a flush takes milliseconds): fail, never hang.
        assert select.select([rfd], [], [], FIRST_FLUSH_LIMIT_S)[0], "the writer never flushed"
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        got += chunk
    return got


def _run_child(chain: Chain, rng: random.Random) -> None:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(chain.directory, chain.generation, chain.closing, wfd)
        os._exit(0)
    os.close(wfd)
    chunks = []
    # Most kills land after the child has flushed once (it said so), at a random point of the
    # flush cycles that follow; the rest at a random point from its start (open, schema,
    # the first flush). Waiting for the report, not for a time, keeps that share whatever the
    # load beside the test.
    if rng.random() < KILLED_AFTER_A_FLUSH:
        chunks.append(_first_report(rfd))
    time.sleep(rng.uniform(0, MAX_LIFE_S))
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    lines = b"".join(chunks).decode().splitlines()
    errors = [line for line in lines if line.startswith("error")]
    assert not errors, errors
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    if lines:
        chain.reported[chain.generation] = int(lines[-1])
    chain.kills += 1


def _check_after_crash(chain: Chain) -> None:
    d = chain.directory
    db, bodies = d / "session.db", d / "session.bodies"
    if not (db.exists() and bodies.exists()):
        # Killed before the pair existed: nothing can have been reported.
        assert not chain.reported, "a flush was reported but the ledger is missing"
        chain.early_kills += 1
        return
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, event_id FROM event_body_blobs").fetchall()
        extent = conn.execute("SELECT COALESCE(MAX(block_offset + disk_len), 16) FROM body_blocks").fetchone()[0]
    except sqlite3.OperationalError as e:
        # Killed while the first writer was creating the schema: nothing was reported.
        assert not chain.reported and "no such table" in str(e), e
        chain.early_kills += 1
        return
    finally:
        conn.close()
    present: dict[int, int] = {}
    for _, event_id in rows:
        g, i = parse_key(event_id)
        present[g] = max(present.get(g, -1), i)
    # Zero committed bodies lost: every flush a child reported is in the index.
    for g, last in chain.reported.items():
        assert present.get(g, -1) >= last, f"writer {g} reported event {last} committed; the index ends at " \
                                           f"{present.get(g)}"
    if present.get(chain.generation, -1) > chain.reported.get(chain.generation, -1):
        chain.unreported_commits += 1   # the commit landed, the kill came before the report
    size = bodies.stat().st_size
    assert extent <= size, f"the index names bytes up to {extent} of a {size}-byte archive"
    if size > extent:
        chain.torn_tails += 1
    # A torn tail is never referenced: every extent ends on one of its block's segment ends.
    oracle.check_index_extents(db)
    # Every body read back exactly (only the rows new since the last kill, to stay fast) ...
    with Ledger(d) as ledger:
        for rowid, event_id in rows:
            if rowid in chain.verified_rows:
                continue
            g, i = parse_key(event_id)
            assert ledger.read_body(event_id, "net_events", "request") == body_for(g, i, chain.closing)
            chain.verified_rows.add(rowid)
        # ... and all of them through the kernel and the doctor: zero false damage.
        verified, findings = ledger.verify()
        assert not findings and verified == len(rows), findings[:3]
    report = check_ledger(db, verify_bodies=True)
    assert report.sound and report.exit_code() == 0, [
        (c.name, [f.message for f in c.findings]) for c in report.checks.values() if c.findings]


def _finish_cleanly(chain: Chain) -> None:
    """A last writer after all the kills appends, closes and leaves a ledger that checks clean."""
    chain.generation += 1
    with LedgerWriter(chain.directory, close_every_flush=chain.closing) as writer:
        for i in range(5):
            writer.insert("net_events", net_row(event_key(chain.generation, i)),
                          bodies=[Body("request", body_for(chain.generation, i, chain.closing), "http.request")])
    chain.reported[chain.generation] = 4
    _check_after_crash(chain)
    with Ledger(chain.directory) as ledger:
        assert sum(1 for _ in ledger.bodies()) == len(chain.verified_rows)


@pytest.mark.parametrize("closing", [False, True], ids=["blocks-stay-open", "blocks-closing"])
def test_a_writer_killed_at_random_points_loses_no_committed_body_and_leaves_no_false_damage(tmp_path, closing):
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    sample_bodies()  # loaded once here: a forked child must not spend its short life on it
    rng = random.Random(KILL_SEED + closing)
    chain = Chain(tmp_path / "ledger", closing)
    for generation in range(KILLS):
        chain.generation = generation
        _run_child(chain, rng)
        try:
            _check_after_crash(chain)
        except (AssertionError, LedgerError) as e:
            raise AssertionError(f"after kill {chain.kills} (writer {generation}): {e}") from e
    _finish_cleanly(chain)
    assert chain.kills == KILLS
    # The kills really landed across the flush cycle, not only between flushes.
    assert len(chain.reported) > KILLS // 2
    assert chain.torn_tails + chain.unreported_commits > 0
    print(f"\n{'closing' if closing else 'open'} chain: {chain.kills} kills survived, "
          f"{len(chain.verified_rows)} bodies committed and read back, {chain.torn_tails} torn tails left "
          f"unreferenced, {chain.unreported_commits} commits that landed unreported, "
          f"{chain.early_kills} kills before the ledger existed")
