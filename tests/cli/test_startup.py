"""capsem-ledger's start-up: a command imports what it uses when it is the one asked for
(``--version``, ``--help`` and ``list`` load neither numpy nor the check package); a Ctrl-C
or SIGTERM that arrives while the command is still being imported ends in one line and the
usual exit status, never a traceback; and the process starts no BLAS thread per core for the
numpy it never multiplies matrices with."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Imports the entry point, then sends the signal from inside an import: of the command's module
# (before it runs: "capsem-ledger: ...") or of what the command loads once it runs (the check
# package: "capsem-ledger check: ..."), exactly where a user's early Ctrl-C lands.
_EARLY_SIGNAL = """
import os, signal, sys
import capsem_core.cli as cli

class Tripwire:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[2]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), int(sys.argv[1]))
        return None

sys.meta_path.insert(0, Tripwire())
sys.exit(cli.main(["check", "--db", "no-such-ledger/session.db"]))
"""


@pytest.mark.parametrize(("module", "who"), [("capsem_core.cli.check", "capsem-ledger"),
                                             ("capsem_core.check", "capsem-ledger check")])
@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                      (signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGHUP, 129, "terminated")])
def test_a_signal_while_a_command_loads_is_one_line_and_the_usual_status(signum: int, code: int, word: str,
                                                                         module: str, who: str) -> None:
    done = subprocess.run([sys.executable, "-c", _EARLY_SIGNAL, str(int(signum)), module], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr == f"{who}: {word}\n"


def test_a_sighup_the_user_ignored_stays_ignored() -> None:
    """``nohup capsem-ledger ...``: the command was asked to outlive its terminal, so a SIGHUP
    (here while the check loads) changes nothing: it ends as it would have without one."""
    def ignore_hangups() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    done = subprocess.run([sys.executable, "-c", _EARLY_SIGNAL, str(int(signal.SIGHUP)), "capsem_core.check"],
                          capture_output=True, text=True, timeout=60, preexec_fn=ignore_hangups)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("capsem-ledger check: ") and "terminated" not in done.stderr


def test_on_termination_sets_sigterm_and_sighup_and_restore_puts_them_back() -> None:
    from capsem_core.cli.errors import on_termination, raise_terminated, restore

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    previous = on_termination()
    try:
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        assert signal.getsignal(signal.SIGHUP) is raise_terminated
    finally:
        restore(previous)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = on_termination()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        restore(previous)
    finally:
        signal.signal(signal.SIGHUP, before[1])


# The signal comes while argparse builds the parser (the first add_argument call), which on a
# busy or emulated machine takes a noticeable while: through app.main with the command loaded,
# or through the entry point, which loads it and hands over to app.main (no signal between the
# two may find the default action, a silent death).
_SIGNAL_IN_PARSER = """
import argparse, os, sys
import capsem_core.cli as cli
from capsem_core.cli import app
real = argparse.ArgumentParser.add_argument

def tripwire(self, *args, **kwargs):
    argparse.ArgumentParser.add_argument = real
    os.kill(os.getpid(), int(sys.argv[1]))
    return real(self, *args, **kwargs)

words = ["check", "--db", "no-such-ledger/session.db"]
if sys.argv[2] == "app.main":
    app.command_module("check")
argparse.ArgumentParser.add_argument = tripwire
sys.exit(app.main(words) if sys.argv[2] == "app.main" else cli.main(words))
"""


@pytest.mark.parametrize("entry", ["app.main", "cli.main"])
@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                      (signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGHUP, 129, "terminated")])
def test_a_signal_while_the_arguments_are_parsed_is_one_line(signum: int, code: int, word: str, entry: str) -> None:
    done = subprocess.run([sys.executable, "-c", _SIGNAL_IN_PARSER, str(int(signum)), entry], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr == f"capsem-ledger: {word}\n"


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


_LOADED = """
import sys
import capsem_core.cli as cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = ("numpy", "capsem_core.check", "capsem_core.ledger", "capsem_core.snapshot", "rich", "capsem_core.columns")
print(code, ",".join(m for m in heavy if m in sys.modules))
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["list"], ["list", "--json"],
                                  *([name, "--help"] for name in ("body", "check", "events", "export", "list", "rollup",
                                                                  "sample"))])
def test_version_help_and_list_load_neither_numpy_nor_the_check_package(argv: list[str], tmp_path: Path) -> None:
    env = dict(os.environ, CAPSEM_HOME=str(tmp_path))   # list: no main.db there, one line, exit 1
    done = subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, timeout=60, env=env)
    code, loaded = (done.stdout.splitlines()[-1].split(" ") + [""])[:2]
    assert code in ("0", "1") and loaded == "", (argv, done.stdout[-300:], done.stderr[-300:])


@pytest.mark.parametrize("package", ["capsem_core", "capsem_core.events", "capsem_core.writer", "capsem_core.sample"])
def test_every_name_a_lazy_package_exports_resolves_and_dir_lists_it(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    names = [n for n in module.__all__ if n != "__version__"]
    assert sorted(names) == sorted(module._HOMES)   # the literal __all__ (for type checkers) and the table agree
    # Type checkers read exports from a literal list only: ``[*_HOMES]`` hid every name from mypy --strict.
    tree = ast.parse(Path(module.__file__ or "").read_text())
    spelled = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    assert len(spelled) == 1 and isinstance(spelled[0], ast.List)
    assert all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in spelled[0].elts)
    for name in names:
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{module._HOMES[name]}"), name)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_a_light_module_of_a_lazy_package_loads_none_of_its_heavy_siblings() -> None:
    # What the events and sample commands' arguments need: the event tables and limits, the
    # sample mixes and sizes (through their packages, as the command line imports them).
    probe = ("import sys\nfrom capsem_core.events import EVENT_TABLE_NAMES, MAX_LIMIT\n"
             "from capsem_core.sample import MIXES, parse_size\n"
             "print(sorted(m for m in ('numpy', 'capsem_core.events.reader', 'capsem_core.writer.ledger', "
             "'capsem_core.writer.archive', 'capsem_core.sample.ledger', 'capsem_core.sample.home') "
             "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_importing_the_command_line_loads_no_command() -> None:
    probe = ("import sys, capsem_core.cli\n"
             "print(sorted(m for m in sys.modules if m.startswith('capsem_core.') or m == 'numpy'))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['capsem_core.cli', 'capsem_core.cli.errors']", done.stdout


def test_the_package_and_its_command_line_load_nothing_the_interpreter_has_not() -> None:
    """A Ctrl-C before ``main`` runs is a traceback no code of ours can catch: that window is
    kept to executing these two small modules (typing alone took 20 ms)."""
    probe = ("import sys\nbefore = set(sys.modules)\nimport capsem_core.cli\n"
             "print(sorted(m for m in set(sys.modules) - before if not m.startswith('capsem_core')))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(eval(done.stdout))   # a list of module names (an editable install's finder adds importlib's)
    assert not loaded & {"typing", "threading", "signal", "enum", "re"}, loaded


# A native module turns a Ctrl-C during its import into an ImportError of its own (numpy's
# "PyCapsule_Import could not import module ..."): the import raises one whose context is the
# KeyboardInterrupt, as theirs do.
_INTERRUPTED_IMPORT = """
import sys
import capsem_core.cli as cli

class Tripwire:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1]:
            sys.meta_path.remove(self)
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:
                raise ImportError("could not import module datetime")
        return None

sys.meta_path.insert(0, Tripwire())
sys.exit(cli.main(["check", "--db", "no-such-ledger/session.db"]))
"""


@pytest.mark.parametrize(("module", "who"), [("capsem_core.cli.check", "capsem-ledger"),
                                             ("capsem_core.check", "capsem-ledger check")])
def test_an_import_error_a_ctrl_c_caused_is_an_interrupt_not_a_traceback(module: str, who: str) -> None:
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT, module], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, f"{who}: interrupted\n")


_CHECK_LOADED = """
import sys
import capsem_core.cli as cli
code = cli.main(sys.argv[1:])
unused = ("capsem_core.sessions.maindb", "capsem_core.sessions.totals", "capsem_core.check.incremental",
          "capsem_core.check.record", "capsem_core.check.subset", "capsem_core.cli.list", "capsem_core.cli.body",
          "shutil")
print(code, ",".join(m for m in unused if m in sys.modules))
"""


def test_a_check_named_with_db_loads_neither_main_db_nor_the_verify_machinery(tmp_path: Path) -> None:
    # --db has no home, so main.db's reader and the rollup are never needed; without
    # --verify-bodies nothing chooses blocks to read back; and no other command is built.
    ledger = tmp_path / "ledger"
    subprocess.run([sys.executable, "-m", "capsem_core", "sample", "--bodies", "20", str(ledger)], check=True,
                   capture_output=True, timeout=120)
    done = subprocess.run([sys.executable, "-c", _CHECK_LOADED, "check", "--db", str(ledger)], capture_output=True,
                          text=True, timeout=120)
    code, loaded = (done.stdout.splitlines()[-1].split(" ") + [""])[:2]
    assert code == "0" and loaded == "", (done.stdout[-300:], done.stderr[-300:])


_GC_AFTER = """
import gc, sys
from capsem_core.cli import main
before = (gc.get_threshold(), gc.get_freeze_count())
if sys.argv[1] == "program":
    sys.argv = ["capsem-ledger", "check", "--db", "no-such-ledger/session.db"]
    code = main()
else:
    code = main(["check", "--db", "no-such-ledger/session.db"])
print(code, before[0] == gc.get_threshold(), gc.get_freeze_count() > before[1])
"""


@pytest.mark.parametrize(("how", "frozen"), [("program", "True"), ("caller", "False")])
def test_only_the_process_own_entry_freezes_what_it_loaded_and_keeps_the_usual_thresholds(how: str,
                                                                                          frozen: str) -> None:
    # capsem-ledger itself freezes what it loaded (its exit need not traverse it); a program
    # calling main(argv) keeps its collector as it set it. Both end with the usual thresholds.
    done = subprocess.run([sys.executable, "-c", _GC_AFTER, how], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == f"1 True {frozen}", done.stdout + done.stderr


_GC_PHASES = """
import gc
from capsem_core.cli import startup
usual = gc.get_threshold()
startup.loaded()                       # nothing begun: nothing changes
print(gc.get_threshold() == usual, gc.get_freeze_count())
startup.begin()
print(gc.get_threshold()[0] == startup.LOADING_THRESHOLD, gc.get_threshold()[1:] == usual[1:])
startup.loaded()
print(gc.get_threshold() == usual, gc.get_freeze_count() > 0)
"""


def test_while_a_command_loads_collections_wait_and_once_loaded_the_usual_thresholds_return() -> None:
    done = subprocess.run([sys.executable, "-c", _GC_PHASES], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["True", "0", "True", "True", "True", "True"], done.stdout


@pytest.mark.parametrize("columns", ["50", "120"])
def test_help_is_laid_out_at_the_width_columns_asks_for(columns: str) -> None:
    # The width is read once per parser (not through shutil at every argument), still as
    # argparse reads it: $COLUMNS first, less its margin of two.
    env = dict(os.environ, COLUMNS=columns)
    done = subprocess.run([sys.executable, "-m", "capsem_core", "check", "--help"], capture_output=True, text=True,
                          timeout=60, env=env, check=True)
    widest = max(len(line) for line in done.stdout.splitlines())
    assert int(columns) - 12 <= widest <= int(columns) - 2, done.stdout


def test_a_check_loads_only_what_a_check_uses(tmp_path: Path) -> None:
    """What a check of ordinary ledgers never uses is left unloaded: hashlib alone (OpenSSL's
    bindings) cost it 5 ms of its start-up, json (for --json and error objects) about 1.5 ms,
    the writer, events, export and fleet more."""
    from capsem_core.sample import write_sample_ledger

    write_sample_ledger(tmp_path / "s", bodies=20)
    probe = ("import sys\nfrom capsem_core.cli import main\n"
             "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
             "unused = ('hashlib', 'json', 'capsem_core.writer', 'capsem_core.events.reader', 'capsem_core.export', "
             "'capsem_core.fleet.run', 'rich')\n"
             "print(code, sorted(m for m in unused if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe, "check", "--db", str(tmp_path / "s"), "--verify-bodies"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []", (done.stdout[-500:], done.stderr[-500:])
