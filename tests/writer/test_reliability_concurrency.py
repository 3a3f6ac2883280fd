"""Readers beside a live writer, and the one-writer rule.

A forked writer process appends to a ledger (segments into open blocks, blocks closing by
size and at random flushes) and reports each flush after ``flush()`` returned. Meanwhile this
process reads the same ledger every way there is: a long-lived ``Ledger`` (read_body of every
reported body, bodies()), fresh ``Ledger`` opens, the native verify kernel and
``check --verify-bodies``. Each must see a consistent committed prefix: every reported body
exact, nothing indexed that does not verify, and never an error the writer caused. A second
writer, from a thread or another process, is refused with WriterBusy.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.reliability_helpers import net_row, run_cli_check, sample_bodies, tree_snapshot, write_fixture

from capsem_core import verify as _verify
from capsem_core._native import _archive
from capsem_core.check import check_ledger
from capsem_core.errors import WriterBusy
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

WRITER_SECONDS = float(os.environ.get("CAPSEM_CONCURRENCY_SECONDS", "4"))


def body_of(i: int) -> bytes:
    r = random.Random(i)
    if r.random() < 0.05:
        return r.randbytes(r.randrange(100_000, 300_000))   # crosses the 1 MiB target now and then
    pool = sample_bodies()
    return pool[r.randrange(len(pool))] + b" #" + str(i).encode()


def event(i: int) -> str:
    return f"{i:012x}"


def _writer(directory: Path, seconds: float, wfd: int) -> None:
    try:
        r = random.Random(5)
        now = [1_790_000_000.0]
        writer = LedgerWriter(directory, clock=lambda: now[0])
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            for _ in range(r.randrange(1, 6)):
                writer.insert("net_events", net_row(event(i)), bodies=[Body("request", body_of(i), "http.request")])
                i += 1
                now[0] += 0.01
            if r.random() < 0.15:
                now[0] += 3601   # this flush closes the open block (stale)
            writer.flush()
            os.write(wfd, f"{i - 1}\n".encode())
            time.sleep(r.uniform(0, 0.01))
        writer.close()
        os.write(wfd, b"closed\n")
    except BaseException as e:  # noqa: BLE001 - the parent fails the test on it
        os.write(wfd, f"error {type(e).__name__}: {e}\n".encode())
        os._exit(3)
    os._exit(0)


class Reports:
    """Lines the writer sent: the last reported event index, read without blocking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.buffer = b""
        self.last = -1
        self.closed = False

    def poll(self) -> int:
        try:
            while chunk := os.read(self.fd, 65536):
                self.buffer += chunk
        except BlockingIOError:
            pass
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            text = line.decode()
            assert not text.startswith("error"), text
            if text == "closed":
                self.closed = True
            else:
                self.last = int(text)
        return self.last


def test_readers_beside_a_live_writer_see_a_consistent_committed_prefix(tmp_path):
    sample_bodies()
    d = tmp_path / "ledger"
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _writer(d, WRITER_SECONDS, wfd)
    os.close(wfd)
    reports = Reports(rfd)
    rounds = {"read_body": 0, "bodies": 0, "verify": 0, "check": 0, "cli": 0}
    try:
        while reports.poll() < 0:
            time.sleep(0.01)
        long_lived = Ledger(d)
        read_upto = -1
        k = 0
        while not reports.closed:
            last = reports.poll()
            # A long-lived reader follows the growing file: every newly reported body, exact.
            for i in range(read_upto + 1, last + 1):
                assert long_lived.read_body(event(i), "net_events", "request") == body_of(i)
                rounds["read_body"] += 1
            read_upto = last
            k += 1
            step = k % 4
            if step == 0:
                with Ledger(d) as fresh:
                    n = 0
                    for record in fresh.bodies():
                        assert record.data == body_of(int(record.event_id, 16))
                        n += 1
                    assert n >= last + 1
                rounds["bodies"] += 1
            elif step == 1:
                verified, findings = _verify.verify_ledger(str(d / "session.db"))
                assert not findings, findings[:3]
                assert verified >= last + 1
                rounds["verify"] += 1
            elif step == 2:
                # A writer appending is never damage: any error finding fails. (The writer's
                # provider traffic without model calls is a warning, whatever the timing.)
                report = check_ledger(d / "session.db", verify_bodies=True)
                damage = [(c.name, f.message) for c in report.checks.values() for f in c.findings
                          if f.severity == "error"]
                assert report.sound and not damage, damage
                rounds["check"] += 1
            else:
                code, out, err = run_cli_check(d / "session.db")
                result = json.loads(out)
                damage = {f["code"] for c in result["checks"].values() for f in c["findings"] if f["severity"] == "error"}
                assert (code, err, damage) == (0, "", set()), (code, err, damage)
                rounds["cli"] += 1
        long_lived.close()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        os.close(rfd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert min(rounds.values()) >= 2, rounds
    with Ledger(d) as ledger:
        assert sum(1 for _ in ledger.bodies()) == reports.last + 1
    print(f"\nreaders beside a writer: {reports.last + 1} bodies written, {rounds}")


def test_a_second_writer_in_another_thread_is_refused_with_writer_busy(tmp_path):
    d = tmp_path / "ledger"
    write_fixture(d, count=2)
    with LedgerWriter(d) as first:
        errors: list[BaseException] = []

        def second() -> None:
            try:
                LedgerWriter(d, lock_timeout=0.1)
            except BaseException as e:  # noqa: BLE001 - examined below
                errors.append(e)

        before = tree_snapshot(d)
        t = threading.Thread(target=second)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], WriterBusy), errors
        assert errors[0].path == d / "session.db"
        assert "already has a writer" in str(errors[0]) and str(d) in str(errors[0])
        assert tree_snapshot(d) == before, "the refused writer touched the ledger"
        first.insert("net_events", net_row("aaaaaaaaaaaa"), bodies=[Body("request", b"still mine", "http.request")])
    with Ledger(d) as ledger:
        assert ledger.read_body("aaaaaaaaaaaa", "net_events", "request") == b"still mine"
    LedgerWriter(d).close()  # released: the next writer gets it


_SECOND_WRITER = r"""
import sys
from capsem_core.errors import WriterBusy
from capsem_core.writer import LedgerWriter
try:
    LedgerWriter(sys.argv[1], lock_timeout=0.2)
except WriterBusy as e:
    print("WriterBusy", e.path)
    print(e)
    sys.exit(1)
print("opened")
"""


def test_a_second_writer_in_another_process_is_refused_with_writer_busy(tmp_path):
    d = tmp_path / "ledger"
    write_fixture(d, count=2)
    with LedgerWriter(d):
        before = tree_snapshot(d)
        proc = subprocess.run([sys.executable, "-c", _SECOND_WRITER, str(d)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
        first, message = proc.stdout.splitlines()[:2]
        assert first == f"WriterBusy {d / 'session.db'}"
        assert "already has a writer" in message
        assert tree_snapshot(d) == before
    proc = subprocess.run([sys.executable, "-c", _SECOND_WRITER, str(d)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "opened", proc.stderr


def test_a_writer_in_another_process_refuses_this_one(tmp_path):
    d = tmp_path / "ledger"
    write_fixture(d, count=2)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            w = LedgerWriter(d)
            os.write(wfd, b"open\n")
            time.sleep(30)
            w.close()
        finally:
            os._exit(0)
    os.close(wfd)
    try:
        assert os.read(rfd, 5) == b"open\n"
        with pytest.raises(WriterBusy, match="already has a writer"):
            LedgerWriter(d, lock_timeout=0.2)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(rfd)
    LedgerWriter(d).close()  # the lock dies with its process
