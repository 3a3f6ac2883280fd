"""Running capsem-ledger as a real process for the command tests: plain pipes, or stdout
on a raw pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tty


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "capsem_core", *args], capture_output=True, timeout=120, cwd=cwd)


def run_on_a_terminal(*args: str) -> tuple[int, bytes, bytes]:
    """(exit status, what the terminal showed, stderr) with stdout on a raw pty."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", *args], stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("the command did not finish")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    code = proc.wait(timeout=60)
    assert proc.stderr is not None
    return code, b"".join(chunks), proc.stderr.read()
