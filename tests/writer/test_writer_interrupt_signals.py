"""Ctrl-C and SIGTERM never damage a ledger: real signals at random moments into a writer loop.

A forked child (no interpreter start-up, so a round costs milliseconds) writes bodies of mixed
sizes through ``LedgerWriter`` with automatic background flushes, explicit flushes and block
closes, inside ``with LedgerWriter(...)``, the way a program that does not think about signals
writes. SIGINT raises KeyboardInterrupt (Python's default handler); SIGTERM raises an exception
from a handler the child installs, as ``capsem-ledger`` does. The parent sends one signal at a
random (seeded) moment, waits for the child to exit with 130 / 143, then checks the ledger the
way ``capsem-ledger check --db ... --verify-bodies`` does, reads every indexed body with the
independent oracle, and reopens the ledger for writing: the new bodies must verify too.

The same ledger is reused for ROUNDS_PER_LEDGER rounds (each child reopens the ledger the one
before it left interrupted), then a fresh one starts, so a round's checks stay small; a damaged
one is counted and replaced, so the count says how many interrupts did damage.
CAPSEM_INTERRUPT_SIGINTS / CAPSEM_INTERRUPT_SIGTERMS / CAPSEM_INTERRUPT_SEED change the campaign.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from oracles import archive_reader as oracle
import pytest
from tests.reliability_helpers import net_row

from capsem_core.check import check_ledger
from capsem_core.ledger import Ledger
from capsem_core.writer import Body, LedgerWriter

SIGINTS = int(os.environ.get("CAPSEM_INTERRUPT_SIGINTS", "100"))
SIGTERMS = int(os.environ.get("CAPSEM_INTERRUPT_SIGTERMS", "30"))
SEED = int(os.environ.get("CAPSEM_INTERRUPT_SEED", "20261201"))
MAX_DELAY_S = 0.08
# Rounds that reuse one ledger (each child reopening what the one before it left) before a
# fresh one starts.
ROUNDS_PER_LEDGER = 16
# A child still running this long after its signal lost it (see _interrupt): signal again.
RESEND_AFTER_S = 10.0


class Terminated(BaseException):
    """What the child's SIGTERM handler raises (capsem-ledger's handler does the same)."""


def body_for(tag: str, i: int) -> bytes:
    """Body ``i`` of writer ``tag``: mostly small, some repeated (dedup), some large."""
    r = random.Random(f"{tag}/{i}")
    roll = r.random()
    if roll < 0.05:
        return r.randbytes(r.randrange(20_000, 90_000))            # incompressible, slow to compress
    if roll < 0.15:
        return (f"{tag} large {i % 3} ".encode()) * r.randrange(2_000, 12_000)  # compressible, large
    if roll < 0.3:
        return f"a body repeated across the ledger {i % 4}".encode() * 40  # dedup within block and archive
    if roll < 0.65:
        return r.randbytes(r.randrange(1, 3_000))
    return (f"{tag} {i} " * r.randrange(1, 200)).encode()


def _child(directory: Path, tag: str, codec: str, wfd: int) -> None:
    # A child that outlives its signal (90 s, far beyond a slow disk) is stuck: dump where it is
    # and fail the round.
    faulthandler.dump_traceback_later(90, exit=True, file=sys.stderr)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, terminate)
    r = random.Random(tag)
    code = 0
    try:
        with LedgerWriter(directory, codec=codec, flush_rows=r.choice([5, 13, 40]),
                          close_every_flush=r.random() < 0.3, lock_timeout=5.0) as writer:
            os.write(wfd, b"open\n")
            i = 0
            while True:
                eid = f"{tag}{i:08x}"
                writer.insert("net_events", net_row(eid), [Body("request", body_for(tag, i), "http.request"),
                                                           Body("response", body_for(tag, i + 7), "http.request")])
                i += 1
                if i % 17 == 0:
                    writer.flush()
    except KeyboardInterrupt:
        code = 130
    except Terminated:
        code = 143
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test
        import traceback

        trace = "".join(traceback.format_exception(e)).replace("\n", " | ")
        os.write(wfd, f"error {type(e).__name__}: {e} || {trace}\n".encode())
        code = 3
    os._exit(code)


def _interrupt(directory: Path, tag: str, codec: str, signum: int, delay: float) -> tuple[int, list[str]]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            _child(directory, tag, codec, wfd)
        finally:
            os._exit(4)
    os.close(wfd)
    first = b""
    while not first.endswith(b"\n"):
        chunk = os.read(rfd, 1)
        if not chunk:
            break
        first += chunk
    resent = 0
    if first == b"open\n":
        time.sleep(delay)
        os.kill(pid, signum)
        # CPython drops an exception that a signal handler raises while a weakref callback or
        # __del__ runs ("Exception ignored in ..."): the signal is then lost, as a Ctrl-C can
        # be, and the writer goes on. Like a user pressing Ctrl-C again, signal once more
        # after a while; what is judged is the ledger the interrupt leaves.
        deadline = time.monotonic() + RESEND_AFTER_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                resent += 1
                os.kill(pid, signum)
                deadline = time.monotonic() + RESEND_AFTER_S
            time.sleep(0.005)
    else:
        _, status = os.waitpid(pid, 0)
    rest = b""
    while chunk := os.read(rfd, 65536):
        rest += chunk
    os.close(rfd)
    lines = (first + rest).decode().splitlines() + [f"resent {resent}"] * bool(resent)
    return os.waitstatus_to_exitcode(status), lines


def _damage(directory: Path) -> str | None:
    """Why this ledger is not sound, or None: check --verify-bodies, the oracle and the reader."""
    db = directory / "session.db"
    report = check_ledger(db, verify_bodies=True)
    if not (report.sound and report.exit_code() == 0):
        return "; ".join(f.message for c in report.checks.values() for f in c.findings)[:300]
    try:
        oracle.check_index_extents(db)
        bodies = oracle.archived_bodies(db)
    except AssertionError as e:
        return f"oracle: {e}"[:300]
    for b in bodies:
        if b.event_id.startswith("f") or b.event_id.startswith("e"):
            continue  # the parent's own reopen bodies are checked by _reopen
        tag, i = b.event_id[:4], int(b.event_id[4:], 16)
        want = body_for(tag, i if b.direction == "request" else i + 7)
        if b.data != want:
            return f"body {b.event_id}/{b.direction} reads back wrong"
    with Ledger(directory) as ledger:
        verified, findings = ledger.verify()
        if findings or verified != len(bodies):
            return f"verify kernel: {verified} of {len(bodies)} verified, {findings[:2]}"
    return None


def _reopen(directory: Path, codec: str, n: int) -> str | None:
    """A new writer on the interrupted ledger appends bodies that read back and verify."""
    eid = f"e{n:011x}"
    data = f"written after interrupt {n} ".encode() * (1 + n % 50)
    with LedgerWriter(directory, codec=codec) as writer:
        if writer.archive_out_of_service:
            return f"the reopened writer stores no bodies: {writer.archive_out_of_service}"
        writer.insert("net_events", net_row(eid), [Body("request", data, "http.request")])
    if oracle.read_body(directory / "session.db", eid, "net_events", "request") != data:
        return "the reopened writer's body does not read back"
    with Ledger(directory) as ledger:
        verified, findings = ledger.verify()
        if findings:
            return f"after the reopen: {findings[:2]}"
    return None


def run_campaign(root: Path, sigints: int, sigterms: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    signals = [signal.SIGINT] * sigints + [signal.SIGTERM] * sigterms
    rng.shuffle(signals)
    damaged: list[str] = []
    exits: dict[int, int] = {}
    resent = 0
    generation = 0
    ledger = written = root / "ledger-0"
    for n, signum in enumerate(signals):
        codec = "zstd" if n % 2 else "deflate"
        directory = ledger / codec
        tag = f"{n:04x}"
        code, lines = _interrupt(directory, tag, codec, signum, rng.uniform(0, MAX_DELAY_S))
        exits[code] = exits.get(code, 0) + 1
        resent += sum(int(line.split()[1]) for line in lines if line.startswith("resent "))
        errors = [line for line in lines if line.startswith("error")]
        if errors or code != (130 if signum == signal.SIGINT else 143):
            why = f"the writer exited {code}: {errors[:1]}"
        else:
            why = _damage(directory) or _reopen(directory, codec, n)
        written = ledger
        # A damaged ledger is replaced; a sound one too after ROUNDS_PER_LEDGER rounds, so each
        # round's checks (which read every body back) stay the size of a few rounds' writing.
        if why is not None or (n + 1) % ROUNDS_PER_LEDGER == 0:
            if why is not None:
                damaged.append(f"signal {n} ({signal.Signals(signum).name}, {codec}): {why}")
            generation += 1
            ledger = root / f"ledger-{generation}"
    return {"damaged": damaged, "exits": exits, "ledgers": written, "resent": resent}


def test_sigint_and_sigterm_at_random_moments_never_damage_a_ledger(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    started = time.monotonic()
    outcome = run_campaign(tmp_path, SIGINTS, SIGTERMS, SEED)
    damaged = outcome["damaged"]
    assert not damaged, f"{len(damaged)} of {SIGINTS + SIGTERMS} interrupts damaged the ledger: {damaged[:5]}"
    assert outcome["exits"] == {130: SIGINTS, 143: SIGTERMS}
    # The command line doctor agrees, on the ledgers the whole chain wrote.
    for codec in ("deflate", "zstd"):
        db = Path(outcome["ledgers"]) / codec / "session.db"
        done = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(db), "--verify-bodies"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    print(f"\n{SIGINTS} SIGINTs and {SIGTERMS} SIGTERMs, 0 damaged ledgers, {outcome['resent']} signals lost "
          f"by CPython and sent again, {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    # Count the damage of the code under test without failing on the first ledger:
    #   python tests/writer/test_writer_interrupt_signals.py [SIGINTS SIGTERMS]
    import tempfile

    args = [int(a) for a in sys.argv[1:3]] or [SIGINTS, SIGTERMS]
    with tempfile.TemporaryDirectory() as tmp:
        out = run_campaign(Path(tmp), args[0], args[1], SEED)
    print(f"{len(out['damaged'])} of {sum(args)} interrupts damaged the ledger; exits {out['exits']}; "
          f"{out['resent']} lost signals sent again")
    for line in out["damaged"][:10]:
        print(" ", line)


@pytest.mark.parametrize(("signum", "codec", "home"), [(signal.SIGINT, "deflate", False), (signal.SIGINT, "zstd", False),
                                                      (signal.SIGTERM, "deflate", False), (signal.SIGINT, "deflate", True),
                                                      (signal.SIGTERM, "zstd", True)],
                         ids=["sigint-deflate", "sigint-zstd", "sigterm", "home-sigint", "home-sigterm"])
def test_an_interrupted_sample_command_leaves_sound_ledgers_and_says_so_in_one_line(tmp_path, signum, codec, home):
    target = tmp_path / "out"
    args = [sys.executable, "-m", "capsem_core", "sample", str(target), "--codec", codec, "--bodies", "200000"]
    if home:
        args += ["--home", "--sessions", "3"]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signal once bodies are being written (the handlers are installed before any writer opens).
    deadline = time.monotonic() + 60
    while not list(target.rglob("session.bodies")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(random.Random(f"{signum}{codec}{home}").uniform(0.05, 0.4))
    child.send_signal(signum)
    out, err = child.communicate(timeout=120)
    assert child.returncode == (130 if signum == signal.SIGINT else 143), (child.returncode, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert ("interrupted" if signum == signal.SIGINT else "terminated") in err and str(target) in err, err
    ledgers = sorted(p.parent for p in target.rglob("session.db") if p.parent.name != "sessions")
    assert ledgers
    for directory in ledgers:
        done = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--db", str(directory / "session.db"),
                               "--verify-bodies"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _reopen(directory, codec, 1) is None
