"""``capsem-ledger``: the subcommands, wired, each imported only when it is the one asked for.

Each command is a module of this package exposing ``add_arguments(parser)`` and
``run(args) -> int`` (``COMMANDS``); this module only wires them up and turns every failure
into one line on stderr, never a traceback: a LedgerError or an OSError is exit status 1, a
UsageError (arguments that contradict each other) is argparse's usage line and exit 2,
Ctrl-C 130, SIGTERM 143 and SIGHUP 129. Every message goes through ``terminal.sanitize``:
LedgerError text quotes paths and values. A command run with ``--json`` also gets its error
as JSON on stdout (``{"error": ..., "command": ..., "exit_status": ..., "path": ...}``), so a
script reading stdout always reads JSON.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn, TextIO

from capsem_core.errors import LedgerError
from capsem_core.cli import startup, streams
from capsem_core.cli.errors import Terminated, UsageError, interrupted, on_termination, restore
from capsem_core.cli.terminal import escape_unencodable, sanitize

# Every command: its name, its one-line help, and the module of this package that holds its
# ``add_arguments(parser)`` and ``run(args) -> int``. Only the command asked for is imported
# (``capsem-ledger --version`` and ``--help`` import none), so each pays for what it uses.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("body", "one verified body's exact bytes", "body"),
    ("check", "integrity report of one session's ledger", "check"),
    ("events", "a session's events in order, resumable from a cursor, or followed live", "events"),
    ("export", "every body of a ledger to files with a manifest, or to one WARC file", "export"),
    ("list", "recent sessions from main.db", "list"),
    ("rollup", "recompute a session's totals in main.db from its ledger", "rollup"),
    ("sample", "write a realistic sample ledger or a whole CAPSEM_HOME", "sample"),
)


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None."""
    names = {name for name, _h, _m in COMMANDS}
    for word in argv:
        if word == "--" or not word.startswith("-"):
            return word if word in names else None
    return None


def command_module(name: str | None) -> ModuleType | None:
    """The module of command ``name``, imported now (None for no command)."""
    for command, _help, module in COMMANDS:
        if command == name:
            return importlib.import_module(f"capsem_core.cli.{module}")
    return None


def package_version() -> str:
    """The package's version: ``capsem_core.__version__``, the one source the build reads it
    from (so it is the installed distribution's too, without importlib.metadata's start-up)."""
    from capsem_core import __version__

    return __version__


class _VersionAction(argparse.Action):
    """--version: the version on stdout, and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog} {package_version()}")  # stdout, as argparse's own version action
        parser.exit()




def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A library warning as one escaped line on stderr (never Python's file:line form)."""
    print(f"capsem-ledger: warning: {sanitize(message)}", file=sys.stderr if file is None else file)


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout at the width ``build_parser`` read once: argparse asks for it at
    every argument it adds (through ``shutil``, whose import alone costs a check of a small
    ledger more than its parse)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _Parser.help_width if width is None else width)


def _terminal_columns() -> int:
    """The width help is laid out for: $COLUMNS, else the terminal's, else 80 (shutil's rule)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are also JSON on stdout when the command line
    asks for ``--json`` (set by ``main`` before parsing), laid out by ``_Formatter``."""

    json_wanted = False
    help_width = 78   # the terminal's columns less argparse's margin (set by build_parser)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        # An option is its whole name: argparse's prefixes took `events --json` for --jsonl
        # and `check --jso` for --json (so the usage error of one was not JSON), and a later
        # option sharing a prefix would change what an old command line means.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: Any = None) -> None:
        # Help is output asked for: one that cannot be written (stdout closed or full) is a
        # failure main() words, not argparse's silent exit 0. Usage errors on stderr stay
        # best effort, as argparse has them.
        if not message:
            return
        if file is None or file is sys.stdout:
            sys.stdout.write(message)
            sys.stdout.flush()
            return
        super()._print_message(message, file)

    def error(self, message: str) -> NoReturn:
        if _Parser.json_wanted:
            _write_json_error(self.prog.removeprefix("capsem-ledger").strip() or None, message, 2)
        # argparse quotes what it was given (an unknown option, a bad choice): escaped here,
        # once, for every usage error.
        super().error(sanitize(message))


def _json_in(argv: Sequence[str]) -> bool:
    words = list(argv)
    return "--json" in (words[:words.index("--")] if "--" in words else words)


def build_parser(chosen: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser of the command line. With ``chosen`` (a command named on it) that command
    alone, with its arguments (its module imported); else every command's name and help
    (enough for ``--help`` and for naming the choices of a word that is none). ``every``: all
    commands with their arguments (every module imported: what a walk of the whole command
    line reads)."""
    _Parser.help_width = _terminal_columns() - 2   # argparse's own margin
    parser = _Parser(prog="capsem-ledger", description="Inspect, verify and write Capsem session ledgers.")
    parser.add_argument("--version", action=_VersionAction, help="print the capsem-core version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text, _module in COMMANDS:
        if chosen is not None and name != chosen and not every:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module = command_module(name) if every or name == chosen else None
        if module is not None:
            module.add_arguments(p)
            p.set_defaults(_run=module.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Standard streams closed or failing are dealt with here, once, for every command; so is
    # a character their encoding cannot hold (set on the streams themselves, before guarded
    # wraps them).
    restore_streams = escape_unencodable()
    try:
        with streams.guarded():
            return _main(argv)
    finally:
        restore_streams()


def _main(argv: Sequence[str] | None) -> int:
    args: argparse.Namespace | None = None
    previous: list[tuple[int, Any]] = []
    try:
        # SIGTERM and SIGHUP raise Terminated in every command, as Ctrl-C raises
        # KeyboardInterrupt: the writers' exit paths run (and leave a sound ledger) instead of
        # the process dying mid-record, and a reader ends in the same one line (and 143 or
        # 129), whatever it was doing. Set inside the try, before the parser is built (slow on
        # a busy or emulated machine), so that a signal then ends in the one line too, as a
        # Ctrl-C does. (Handlers belong to the main thread; a caller on another thread keeps
        # its own.)
        previous = on_termination()
        warnings.showwarning = _show_warning
        words = sys.argv[1:] if argv is None else list(argv)
        _Parser.json_wanted = _json_in(words)
        args, extra = build_parser(chosen_command(words)).parse_known_args(words)
        if extra:
            # Said by the command's own parser, so the line names the command.
            args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
        code = int(args._run(args))
        sys.stdout.flush()   # here, so a failure of what is still buffered is said as any other
        return code
    except UsageError as exc:
        if args is None:
            raise
        args._parser.error(str(exc))  # exit 2 after the usage line (and JSON with --json)
        raise  # unreachable: error() exits
    except LedgerError as exc:
        if str(exc.path) == streams.STDOUT_NAME:
            streams.discard_stdout()   # what is still buffered for it would fail again at exit
        return _fail(args, str(exc), exc.path)
    except BrokenPipeError as exc:
        if _stdout_gone():
            streams.discard_stdout()
            return 0   # the reader of our output went away (`| head`): nothing more to say
        return _fail(args, f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", exc.filename)
    except OSError as exc:
        # An I/O failure no module turned into a LedgerError still gets one line naming the file.
        where = f"{exc.filename}: " if exc.filename is not None else ""
        if exc.filename is None and isinstance(exc, FileNotFoundError) and _cwd_removed():
            # os.getcwd() failed making a relative path absolute: the error names no path.
            return _fail(args, "the current directory was removed: a relative path names nothing")
        if streams.failed_on_stdout(exc):
            streams.discard_stdout()
            return _fail(args, f"{where}{exc.strerror or exc}")
        return _fail(args, f"{where}{exc.strerror or exc}", exc.filename)
    except KeyboardInterrupt:
        print(f"{_who(args)}: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"{_who(args)}: terminated", file=sys.stderr)
        return exc.exit_status
    except ImportError as exc:
        # A module a command loads as it runs (numpy) turns a Ctrl-C into its ImportError.
        if not interrupted(exc):
            raise
        print(f"{_who(args)}: interrupted", file=sys.stderr)
        return 130
    finally:
        startup.loaded()   # whatever the command did not say
        restore(previous)


def _cwd_removed() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    except OSError:
        pass
    return False


def _stdout_gone() -> bool:
    """Whether standard output is a pipe or socket whose reader has gone (a broken pipe
    that is ours to end quietly, not one of a helper process's)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)   # POLLERR and POLLHUP are always reported
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):   # no poll (Windows), or no descriptor
        return True


def _fail(args: argparse.Namespace | None, message: str, path: object = None) -> int:
    """The one error line (exit 1), and with --json the same error as JSON on stdout."""
    _json_error(args, message, 1, path)
    print(f"{_who(args)}: {sanitize(message)}", file=sys.stderr)
    return 1


def _json_error(args: argparse.Namespace | None, message: str, code: int, path: object = None) -> None:
    if args is not None and getattr(args, "json", False):
        _write_json_error(args.command, message, code, path)


def _write_json_error(command: str | None, message: str, code: int, path: object = None) -> None:
    """``{"error", "command", "exit_status", "path"}`` on stdout (ASCII: escaped like the line)."""
    import json   # here: a command that succeeds never needs it

    where = None if path is None else (os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path))
    try:
        sys.stdout.write(json.dumps({"error": message, "command": command, "exit_status": code, "path": where},
                                    ensure_ascii=True) + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def _who(args: argparse.Namespace | None) -> str:
    return "capsem-ledger" if args is None else f"capsem-ledger {args.command}"


if __name__ == "__main__":
    sys.exit(main())
