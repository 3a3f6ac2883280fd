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
    """(exit status, what the terminal showed, stderr) of capsem-ledger with stdout on a raw pty."""
    return run_argv_on_a_terminal([sys.executable, "-m", "capsem_core", *args])


def run_argv_on_a_terminal(argv: list[str]) -> tuple[int, bytes, bytes]:
    """(exit status, what the terminal showed, stderr) of any command with stdout on a raw
    pseudo-terminal (no newline translation) and NO_COLOR unset, so colour is on."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError(f"{argv[3:]} did not finish")
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
