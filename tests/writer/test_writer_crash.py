"""Crash safety of the ledger writer: SIGKILL at random points never leaves a wrong answer.

A child process runs LedgerWriter flush cycles (blocks closing now and then, some flushes
in the background) and is killed,
either by this test after a random delay or by itself at a random step of the flush cycle
(mid-write, before or after the archive sync, as COMMIT starts). The same ledger is reused
by every child, so each one also proves a new writer opens the torn ledger, starts a new
block at the old end of the file and writes bodies that read back.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time

from oracles import archive_reader as oracle

CHILD = r'''
import os, random, signal, sqlite3, sys
from capsem_core.writer import Body, LedgerWriter

directory, seed, mode, at = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
hits = 0

def maybe_die(point):
    global hits
    if point == mode:
        hits += 1
        if hits >= at:
            os.kill(os.getpid(), signal.SIGKILL)

real_write, real_sync = os.write, os.fdatasync
def write(fd, data):
    if mode == "mid-write" and len(data) > 100:
        maybe_die("mid-write")
        if hits >= at - 1 and rng.random() < 0.5:
            real_write(fd, bytes(data[:len(data) // 2]))
            os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)
def fdatasync(fd):
    maybe_die("before-sync")
    real_sync(fd)
    maybe_die("after-sync")
os.write, os.fdatasync = write, fdatasync

# Some children leave most flushes to the background flush (a small flush_rows).
w = LedgerWriter(directory, codec=rng.choice(["deflate", "zstd"]), close_every_flush=rng.random() < 0.3,
                 flush_rows=rng.choice([50000, 7]))
every = rng.choice([1, 3])
w._conn.set_trace_callback(lambda sql: maybe_die("commit") if sql == "COMMIT" else None)
print("open", w.archive.end if w.archive else -1, flush=True)
for step in range(100000):
    for r in range(4):
        event_id = f"{seed:04x}{step * 4 + r:08x}"
        w.insert("net_events", {"event_id": event_id, "timestamp": "t", "domain": "d", "decision": "allowed"},
                 [Body(d, BODY(event_id, d), "http.request") for d in ("request", "response")])
    if step % every == every - 1:
        w.flush()
        for done in range(step - every + 1, step + 1):
            print("committed", done, flush=True)
'''

BODY_SOURCE = '''
def BODY(event_id, direction):
    r = random.Random(event_id + direction)
    n = r.choice([0, 40, 700, 3000, 9000, 30000])
    return r.randbytes(n) if r.random() < 0.5 else (event_id + direction + " ").encode() * (n // 20 + 1)
'''


def expected_body(event_id: str, direction: str) -> bytes:
    namespace: dict[str, object] = {"random": random}
    exec(BODY_SOURCE, namespace)
    return namespace["BODY"](event_id, direction)  # type: ignore[operator]


def child_source() -> str:
    return CHILD.replace("from capsem_core.writer import Body, LedgerWriter\n",
                         "from capsem_core.writer import Body, LedgerWriter\n" + BODY_SOURCE)


MODES = ("parent", "parent", "mid-write", "before-sync", "after-sync", "commit")


def test_sigkill_at_random_points_never_leaves_a_wrong_answer(tmp_path):
    rng = random.Random(20260401)
    ledger = tmp_path / "ledger"
    db = ledger / "session.db"
    archive = ledger / "session.bodies"
    source = child_source()
    verified: set[tuple[str, str]] = set()
    kills = 0
    started = time.monotonic()
    for round_ in range(56):
        size_before = archive.stat().st_size if archive.exists() else 16
        mode = MODES[round_ % len(MODES)]
        at = rng.randint(1, 4)
        child = subprocess.Popen([sys.executable, "-c", source, str(ledger), str(round_), mode, str(at)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        opened = child.stdout.readline().split()
        if mode == "parent":
            time.sleep(rng.uniform(0.0, 0.25))
            child.send_signal(signal.SIGKILL)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
        assert child.returncode == -signal.SIGKILL, err
        kills += 1
        # The new writer opened the torn ledger and placed its end at the old end of file.
        assert opened == ["open", str(size_before)], (opened, err)
        # A kill can land inside the child's write of a line: a torn last line names no step.
        committed = [int(words[1]) for words in (line.split() for line in out.splitlines())
                     if len(words) == 2 and words[0] == "committed" and words[1].isdigit()]

        # No index row names the torn tail: every extent is inside the file and on a boundary.
        oracle.check_index_extents(db)
        prefix = f"{round_:04x}"
        bodies = {(b.event_id, b.direction): b
                  for b in oracle.archived_bodies(db, "substr(event_id, 1, 4) = ?", (prefix,))}
        for key, body in bodies.items():
            assert body.data == expected_body(*key), key
            verified.add(key)
        for step in committed:
            for r in range(4):
                event_id = f"{prefix}{step * 4 + r:08x}"
                for direction in ("request", "response"):
                    if expected_body(event_id, direction):
                        assert (event_id, direction) in bodies, (event_id, direction, mode)
        # This writer's first block starts exactly where the file ended when it opened.
        own = [b.block_offset for b in bodies.values() if b.event_id.startswith(prefix)]
        if own:
            assert min(own) == size_before

    # After all the kills, a last writer continues the ledger and everything reads.
    from capsem_core.writer import Body, LedgerWriter
    size_before = archive.stat().st_size
    with LedgerWriter(ledger) as w:
        w.insert("net_events", {"event_id": "f" * 12, "timestamp": "t", "domain": "d", "decision": "allowed"},
                 [Body("request", b"the last word", "http.request")])
    every = oracle.archived_bodies(db)
    assert {(b.event_id, b.direction) for b in every} >= verified
    last = [b for b in every if b.event_id == "f" * 12]
    assert last[0].data == b"the last word" and last[0].block_offset == size_before
    oracle.check_index_extents(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    assert kills >= 50
    print(f"{kills} kills, archive {archive.stat().st_size} bytes, {len(every)} bodies, "
          f"{time.monotonic() - started:.1f} s")
