"""capsem-ledger's start-up: a Ctrl-C or SIGTERM that arrives while the commands are still
being imported ends in one line and the usual exit status, never a traceback; and the process
starts no BLAS thread per core for the numpy it never multiplies matrices with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Imports the entry point, then sends the signal from inside the import of the commands
# (the first import of capsem_core.check), exactly where a user's early Ctrl-C lands.
_EARLY_SIGNAL = """
import os, signal, sys
import capsem_core.cli as cli

class Tripwire:
    def find_spec(self, name, path=None, target=None):
        if name == "capsem_core.check":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), int(sys.argv[1]))
        return None

sys.meta_path.insert(0, Tripwire())
sys.exit(cli.main(["check", "--db", "no-such-ledger/session.db"]))
"""


@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                      (signal.SIGTERM, 143, "terminated")])
def test_a_signal_while_the_commands_load_is_one_line_and_the_usual_status(signum: int, code: int,
                                                                            word: str) -> None:
    done = subprocess.run([sys.executable, "-c", _EARLY_SIGNAL, str(int(signum))], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr == f"capsem-ledger: {word}\n"


# The commands are loaded; the signal comes while argparse builds the parser (the first
# add_argument call), which on a busy or emulated machine takes a noticeable while.
_SIGINT_IN_PARSER = """
import argparse, os, signal, sys
from capsem_core.cli import app
app._commands()
real = argparse.ArgumentParser.add_argument

def tripwire(self, *args, **kwargs):
    argparse.ArgumentParser.add_argument = real
    os.kill(os.getpid(), signal.SIGINT)
    return real(self, *args, **kwargs)

argparse.ArgumentParser.add_argument = tripwire
sys.exit(app.main(["check", "--db", "no-such-ledger/session.db"]))
"""


def test_a_ctrl_c_while_the_arguments_are_parsed_is_one_line_and_130() -> None:
    done = subprocess.run([sys.executable, "-c", _SIGINT_IN_PARSER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "capsem-ledger: interrupted\n"


_BLAS_THREADS = """
import os, sys
import capsem_core.cli as cli
code = cli.main(["sample", "--bodies", "50", sys.argv[1]])
import numpy  # noqa: F401 (loaded by the commands already)
threads = len(os.listdir("/proc/self/task"))
print(os.environ.get("OPENBLAS_NUM_THREADS"), threads, code)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads through /proc")
@pytest.mark.parametrize("asked", [None, "2"])
def test_the_command_line_starts_no_blas_thread_per_core_unless_asked(asked: str | None, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if asked is not None:
        env["OPENBLAS_NUM_THREADS"] = asked
    done = subprocess.run([sys.executable, "-c", _BLAS_THREADS, str(tmp_path / "ledger")], capture_output=True,
                          text=True, timeout=120, env=env)
    value, threads, code = done.stdout.splitlines()[-1].split()
    assert code == "0" and value == (asked or "1")
    if asked is None:
        assert int(threads) == 1   # the interpreter's own thread; no BLAS pool
