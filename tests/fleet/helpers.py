"""What the fleet tests share: homes of real sample ledgers (one damaged), fleet reports
compared without their timings, and a real Dask cluster on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsem_core import db
from capsem_core.format import SEGMENT_HEADER_BYTES
from capsem_core.sample import write_sample_home, write_sample_ledger
from oracles.archive_reader import parse_segment
from tests.fleet.certs import Identity

# Keys of a fleet ledger entry that say where and how long, not what was found.
RUN_KEYS = ("seconds", "worker", "tasks", "attempts", "retried")


def verdicts(report: Any) -> dict[str, str]:
    return {str(r.ledger.directory): r.verdict for r in report}


def findings_of(report: Any) -> dict[str, dict[str, Any]]:
    """Each ledger's JSON entry without the keys that depend on the run."""
    out = {}
    for r in report:
        doc = r.to_json()
        for k in RUN_KEYS:
            doc.pop(k)
        out[doc["path"]] = doc
    return out


def heavy_ledger(directory: Path, bodies: int = 12_000) -> Path:
    """A ledger with real work in it: many small bodies in several blocks (its check takes
    a tenth of a second or more)."""
    write_sample_ledger(directory, seed=7, mix="small", bodies=bodies)
    return directory


def sized_home(home: Path, big_bodies: int = 22_000) -> Path:
    """A home with one small session and one ledger ("big-0") whose session.db is past the
    check's SMALL_CHECK_BYTES, so its page check runs a thread per core of its share; the big
    ledger's directory."""
    write_sample_home(home, sessions=1, seed=5, bodies=40)
    return heavy_ledger(home / "run" / "sessions" / "big-0", bodies=big_bodies)


def copy_ledger(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for name in ("session.db", "session.bodies"):
        shutil.copyfile(source / name, target / name)
    return target


def damage_a_body(ledger: Path) -> int:
    """Flip one byte inside a segment's compressed bytes, in the middle block: the index and
    the archive's structure still agree, and --verify-bodies finds the bodies that segment
    holds. Returns the file offset flipped."""
    conn = db.connect_readonly(ledger / "session.db")
    try:
        rows = conn.execute("SELECT block_offset, disk_len FROM body_blocks ORDER BY block_offset").fetchall()
    finally:
        conn.close()
    block_offset, disk_len = rows[len(rows) // 2]
    bodies = ledger / "session.bodies"
    data = bodies.read_bytes()
    at = block_offset + 8
    head = parse_segment(data[at:at + SEGMENT_HEADER_BYTES], at, 0)
    flip = at + SEGMENT_HEADER_BYTES + head.comp_len // 2
    with open(bodies, "r+b") as f:
        f.seek(flip)
        byte = f.read(1)[0]
        f.seek(flip)
        f.write(bytes([byte ^ 0x5A]))
    return flip


@dataclass
class FleetHome:
    home: Path
    heavy: list[Path]
    damaged: Path
    small: list[Path] = field(default_factory=list)


def fleet_home(root: Path, heavy_source: Path, *, heavy: int = 4, sessions: int = 4,
               damaged: bool = True) -> FleetHome:
    """A home with ``sessions`` small sample sessions (one persistent VM among them, one
    vacuumed), ``heavy`` copies of a work-heavy ledger as ephemeral sessions, the second of
    them damaged (unless ``damaged`` is False)."""
    home = root / "home"
    summary = write_sample_home(home, sessions=sessions, seed=3, bodies=60)
    small = [s.ledger_dir for s in summary.sessions if s.ledger_dir is not None]
    copies = [copy_ledger(heavy_source, home / "run" / "sessions" / f"heavy-{i}") for i in range(heavy)]
    bad = copies[1] if damaged else home / "none"
    if damaged:
        damage_a_body(bad)
    return FleetHome(home, copies, bad, small)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]]

    def kill_worker(self, name: str) -> None:
        proc = self.workers[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def dask_cluster(workdir: Path, workers: int = 2, *, tls: Identity | None = None, env: dict[str, str] | None = None,
                 preload: Path | None = None) -> Iterator[Cluster]:
    """A real ``dask scheduler`` and ``workers`` single-threaded ``dask worker`` processes
    (no nanny: a killed worker stays dead) on 127.0.0.1, on free ports; always torn down.
    With ``tls``, a tls:// cluster: the scheduler and every worker present that certificate
    and take only peers its CA signed. ``env``: more environment for every process (Dask
    reads its configuration from ``DASK_*``); ``preload``: a file each worker runs first."""
    from distributed import Client
    from distributed.security import Security

    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False", **(env or {}))
    address = f"{'tls' if tls else 'tcp'}://127.0.0.1:{free_port()}"
    tls_flags = tls.flags() if tls else []
    security = Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key,
                        require_encryption=True) if tls else None
    log = open(workdir / "dask.log", "wb")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                      "--port", address.rsplit(":", 1)[1], "--no-dashboard",
                                      *(["--protocol", "tls"] if tls else []), *tls_flags],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        procs.append(scheduler)
        named: dict[str, subprocess.Popen[bytes]] = {}
        for i in range(workers):
            name = f"w{i}"
            named[name] = subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", name, "--nthreads", "1",
                 "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(workdir),
                 *tls_flags, *(["--preload", str(preload)] if preload else [])],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
            procs.append(named[name])
        with Client(address, timeout="60s", security=security) as client:
            client.wait_for_workers(workers, timeout=120)
        yield Cluster(address, scheduler, named)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        log.close()


def wait_for(predicate: Any, timeout: float = 60.0, every: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")
