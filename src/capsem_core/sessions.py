"""Sessions: where ledgers live, session identity, and the ``list`` and ``rollup`` commands.

This module owns:

* the paths of one Capsem home (``CAPSEM_HOME``, ``CAPSEM_RUN_DIR``, ``main.db``);
* session registration with a persistent VM's name (``register_session``); main.db itself
  (Capsem's layout, read by column name at any ``user_version``) and the rollup live in
  :mod:`capsem_core.maindb`, re-exported here;
* session identity: the one resolver from a word (session id or VM name) to a ledger
  directory (``resolve_session``), which the ``check``, ``list`` and ``rollup`` commands and
  the Python API all use;
* the ``list`` and ``rollup`` commands of ``capsem-ledger``.

Identity rule (the ledger's invariant): a session id is opaque and names the ephemeral
ledger directory ``run/sessions/<id>/``; a persistent VM's ledger is
``run/persistent/<name>/``. Capsem's main.db records no name: a VM whose directory name is
its id needs nothing more (as Capsem's doctor assumes), and a name that differs from its id
is linked to it by capsem-core's sidecar (:mod:`capsem_core.vmnames`). A name is never
assumed to equal an id, and an id always wins over an equal name.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sqlite3
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, TextIO

from capsem_core import vmnames
from capsem_core.errors import LedgerError, SymlinkRefused
from capsem_core.maindb import (  # noqa: F401  (the public main.db API, re-exported)
    CREATED_AT_COLUMN, DOCTOR_COLUMNS, ID_COLUMN, LIST_COLUMNS, MAIN_DB_DDL, MAIN_DB_VERSION,
    SESSION_COLUMNS, SessionRow, SessionTotals, create_main_db, insert_session, latest_session_id,
    mark_session, now_text, open_main_db, recent_sessions, rollup, rollup_on_close, select_rows_sql,
    session_recorded,
)
from capsem_core.cli.terminal import colour_wanted, sanitize

SESSION_DB = "session.db"
SESSION_BODIES = "session.bodies"

# Session ids and VM names become directory names, so they are held to a short
# allowlist: letters, digits, '.', '_' and '-', starting with a letter or digit.
MAX_SESSION_WORD = 128
_SESSION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

Kind = Literal["ephemeral", "persistent"]

# --- paths ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Home:
    """One Capsem home: the rollup database and the run directory that holds ledgers."""

    home: Path
    run: Path

    @property
    def main_db(self) -> Path:
        return self.home / "sessions" / "main.db"

    @property
    def sessions_root(self) -> Path:
        return self.run / "sessions"

    @property
    def persistent_root(self) -> Path:
        return self.run / "persistent"


def capsem_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME``, default ``~/.capsem``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_HOME")
    return Path(value) if value else Path.home() / ".capsem"


def run_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_RUN_DIR``, default ``$CAPSEM_HOME/run``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_RUN_DIR")
    return Path(value) if value else capsem_home(env) / "run"


def main_db_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME/sessions/main.db``."""
    return capsem_home(environ) / "sessions" / "main.db"


def home_layout(home: Home | os.PathLike[str] | str | None = None,
                environ: Mapping[str, str] | None = None) -> Home:
    """The layout to use: from the environment when ``home`` is None; an explicit home path
    is self-contained (its run directory is ``<home>/run``, whatever the environment says)."""
    if isinstance(home, Home):
        return home
    if home is None:
        return Home(capsem_home(environ), run_dir(environ))
    return Home(Path(home), Path(home) / "run")


# --- session words (ids and display names) -------------------------------------------------

def session_word_problem(word: object) -> str | None:
    """Why ``word`` cannot name a session directory, or None when it can."""
    if isinstance(word, str) and len(word) <= MAX_SESSION_WORD and _SESSION_WORD.fullmatch(word):
        return None
    if not isinstance(word, str):
        return f"a session id or name must be text, not {type(word).__name__}"
    if word == "":
        return "it is empty"
    if "\0" in word:
        return "it contains a NUL byte"
    if "/" in word or "\\" in word:
        return "it contains a path separator"
    if word in (".", ".."):
        return "it names a directory itself, not a session"
    if word.startswith("-"):
        return "it starts with '-'"
    if word.startswith("."):
        return "it starts with '.'"
    if len(word) > MAX_SESSION_WORD:
        return f"it is {len(word)} characters long, more than {MAX_SESSION_WORD}"
    if not _SESSION_WORD.fullmatch(word):
        return "only letters, digits, '.', '_' and '-' may name a session"
    return None


def check_session_word(word: object, what: str = "session") -> str:
    """Return ``word`` if it may name a session directory, else raise LedgerError.

    Runs before any path is built from the word, so nothing outside the run directory is
    ever touched on its behalf."""
    problem = session_word_problem(word)
    if problem is not None:
        raise LedgerError(f"refusing {what} {word!r}: {problem}")
    return word  # type: ignore[return-value]


# --- the ledger pair on disk ---------------------------------------------------------------

def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _pair_on_disk(directory: Path) -> bool:
    """session.db and session.bodies are regular files in a directory that is not a link."""
    return (_is_real_dir(directory) and _is_regular_file(directory / SESSION_DB)
            and _is_regular_file(directory / SESSION_BODIES))



def _refuse_link_dir(directory: Path, word: str) -> None:
    if os.path.islink(directory):
        raise SymlinkRefused(f"refusing session {word}: its ledger directory is a symbolic link", directory)


def locate_ledger(layout: Home, session_id: str, links_by_id: Mapping[str, str]) -> tuple[Path, Kind, str | None]:
    """Where the ledger of a session recorded in main.db lives, its kind and its VM name.

    A linked name wins (``persistent/<name>``); else, as Capsem's doctor looks,
    ``sessions/<id>`` then ``persistent/<id>`` (a VM named by its id); else
    ``sessions/<id>``, which is not on disk."""
    name = links_by_id.get(session_id)
    if name is not None:
        directory = layout.persistent_root / name
        _refuse_link_dir(directory, name)
        return directory, "persistent", name
    ephemeral = layout.sessions_root / session_id
    _refuse_link_dir(ephemeral, session_id)
    if _is_real_dir(ephemeral):
        return ephemeral, "ephemeral", None
    persistent = layout.persistent_root / session_id
    _refuse_link_dir(persistent, session_id)
    if _is_real_dir(persistent):
        return persistent, "persistent", session_id
    return ephemeral, "ephemeral", None


def _recorded_ref(layout: Home, session_id: str, links_by_id: Mapping[str, str]) -> SessionRef:
    problem = session_word_problem(session_id)
    if problem is not None:
        raise LedgerError(f"main.db records session {session_id!r}, which cannot name a directory: {problem}",
                          layout.main_db)
    directory, kind, name = locate_ledger(layout, session_id, links_by_id)
    return SessionRef(session_id, name, directory, kind, _pair_on_disk(directory))


def register_session(main_db: os.PathLike[str] | str, session_id: str, *, name: str | None = None,
                     mode: str = "cli", status: str = "running", created_at: str | None = None,
                     storage_mode: str = "block") -> None:
    """Record a new session in main.db (created with Capsem's layout if missing), as Capsem
    does when a session starts. ``name`` is a persistent VM's name (its ledger is
    ``run/persistent/<name>/``): the row gets ``persistent = 1``, and a name other than the
    id is linked to it in capsem-core's sidecar. None for an ephemeral session."""
    check_session_word(session_id, "session id")
    if name is not None:
        check_session_word(name, "session name")
    path = insert_session(main_db, session_id, mode=mode, status=status, created_at=created_at or now_text(),
                          storage_mode=storage_mode, persistent=name is not None)
    if name is not None:
        vmnames.link_name(path, name, session_id)


# --- session identity ----------------------------------------------------------------------

def resolve_session(word: str | None, *, home: Home | os.PathLike[str] | str | None = None,
                    require_db: bool = True) -> SessionRef:
    """Turn a session id, a VM name, or None (the latest session) into a SessionRef.

    Order: an id recorded in main.db; else a name linked in capsem-core's sidecar; else an
    ephemeral directory ``run/sessions/<word>/`` (directory names there are ids); else a
    persistent directory ``run/persistent/<word>/`` (a name, id unknown). A word that could
    escape its directory is refused before anything is looked up. With ``require_db`` (the
    default) a session whose ``session.db`` is not on disk is an error "session.db not
    found for <word>"."""
    layout = home_layout(home)
    if word is not None:
        check_session_word(word)
    main_db = layout.main_db
    ref: SessionRef | None = None
    has_main_db = main_db.exists()
    links = vmnames.read_links(main_db) if has_main_db else {}
    by_id = vmnames.names_by_id(links)
    if word is None:
        if not has_main_db:
            raise LedgerError(f"main.db not found at {main_db}")
        latest = latest_session_id(main_db)
        if latest is None:
            raise LedgerError("No sessions found in main.db", main_db)
        ref = _recorded_ref(layout, latest, by_id)
        word = latest
    else:
        if has_main_db and session_recorded(main_db, word):
            ref = _recorded_ref(layout, word, by_id)
        elif word in links:
            directory = layout.persistent_root / word
            _refuse_link_dir(directory, word)
            ref = SessionRef(links[word], word, directory, "persistent", _pair_on_disk(directory))
        else:
            for root, kind in ((layout.sessions_root, "ephemeral"), (layout.persistent_root, "persistent")):
                candidate = root / word
                _refuse_link_dir(candidate, word)
                if _is_real_dir(candidate):
                    sid, name = (word, None) if kind == "ephemeral" else (None, word)
                    ref = SessionRef(sid, name, candidate, kind, _pair_on_disk(candidate))  # type: ignore[arg-type]
                    break
        if ref is None:
            raise LedgerError(f"session.db not found for {word}")
    if require_db:
        if os.path.islink(ref.db_path):
            raise SymlinkRefused("refusing a session.db that is a symbolic link", ref.db_path)
        if not _is_regular_file(ref.db_path):
            raise LedgerError(f"session.db not found for {word}")
    return ref


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A resolved session: its id, its VM name and where its ledger lives.

    ``id`` is None only for a persistent VM whose directory exists but which main.db does
    not record (its id cannot be known, and is never guessed from the name)."""

    id: str | None
    name: str | None
    directory: Path
    kind: Kind
    has_ledger: bool

    @property
    def db_path(self) -> Path:
        return self.directory / SESSION_DB

    @property
    def bodies_path(self) -> Path:
        return self.directory / SESSION_BODIES

    @property
    def label(self) -> str:
        """How to name the session to a person: ``name (id)``, or whichever is known."""
        if self.name and self.id and self.name != self.id:
            return f"{self.name} ({self.id})"
        return self.name or self.id or str(self.directory)


def ledger_exists(ref: SessionRef) -> bool:
    """True when ``session.db`` and ``session.bodies`` are really on disk, as regular files
    (not links) in ``ref.directory`` (itself not a link). Looks again; ``ref.has_ledger`` is
    what was seen at resolve time."""
    return _pair_on_disk(ref.directory)


# --- list ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ListFilter:
    """The ``list`` filters, all joined with AND. ``with_db`` is applied before ``limit``."""

    limit: int = 10
    with_model: bool = False
    with_db: bool = False
    with_net: bool = False
    with_tools: bool = False
    min_cost: float = 0.0
    status: str | None = None


@dataclass(frozen=True, slots=True)
class ListedSession:
    row: SessionRow
    name: str | None
    directory: Path | None
    has_ledger: bool


def _directory_names(root: Path) -> list[str]:
    """Names of the real (not linked) subdirectories of ``root``, in one directory read
    (d_type answers is_dir without a stat per entry on most filesystems). A name that is
    not a session word can belong to no session, so it is left out."""
    try:
        with os.scandir(root) as entries:
            return [e.name for e in entries
                    if e.is_dir(follow_symlinks=False) and len(e.name) <= MAX_SESSION_WORD
                    and _SESSION_WORD.fullmatch(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise LedgerError(f"cannot list ledger directories: {exc}", root) from exc


def _where(flt: ListFilter) -> tuple[list[str], list[object]]:
    conds: list[str] = []
    params: list[object] = []
    if flt.with_model:
        conds.append("(s.total_input_tokens + s.total_output_tokens) > 0")
    if flt.with_net:
        conds.append("s.total_requests > 0")
    if flt.with_tools:
        conds.append("s.total_tool_calls > 0")
    if flt.min_cost > 0:
        conds.append("s.total_estimated_cost >= ?")
        params.append(float(flt.min_cost))
    if flt.status is not None:
        # '+': streaming the created_at index beats fetching every row of a common status
        # through idx_sessions_status and sorting them.
        conds.append("+s.status = ?")
        params.append(flt.status)
    return conds, params


def _pair_at(directory: str) -> bool:
    # The per-row check of list, on strings: pathlib costs more than the three lstats.
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return False
        return (stat.S_ISREG(os.lstat(directory + "/" + SESSION_DB).st_mode)
                and stat.S_ISREG(os.lstat(directory + "/" + SESSION_BODIES).st_mode))
    except OSError:
        return False


# How many of the newest matching rows --with-db checks one by one before it reads the
# ledger directories instead: most lists end here, and a scan costs a directory read.
_WITH_DB_PROBE_ROWS = 256



def list_sessions(flt: ListFilter, *, home: Home | os.PathLike[str] | str | None = None) -> list[ListedSession]:
    """Sessions of main.db, newest first, filtered, at most ``flt.limit`` of them.

    ``with_db`` is applied before the limit. The newest matching rows are first checked on
    disk one by one (a few ``lstat`` each); if that does not fill the list, both ledger
    roots are read once and SQLite looks up the rows whose directory exists, older than the
    last row checked, newest first."""
    layout = home_layout(home)
    path = layout.main_db
    if not path.exists():
        raise LedgerError(f"No main.db found at {path}")
    if flt.limit <= 0:
        return []
    sessions_root = str(layout.sessions_root)
    persistent_root = str(layout.persistent_root)
    links = vmnames.read_links(path)
    by_id = vmnames.names_by_id(links)
    conn, have = open_main_db(path, need=LIST_COLUMNS)
    select = select_rows_sql(have)
    out: list[ListedSession] = []
    last: tuple[object, object] | None = None

    def take(raw: Sequence[object]) -> bool:
        """Add the row if it qualifies; True once the list is full."""
        nonlocal last
        last = (raw[CREATED_AT_COLUMN - 1], raw[ID_COLUMN - 1])
        sid = raw[ID_COLUMN - 1]
        name: str | None = None
        directory: str | None = None
        on_disk = False
        if isinstance(sid, str) and session_word_problem(sid) is None:
            name = by_id.get(sid)
            if name is not None:
                directory = persistent_root + "/" + name
                on_disk = _pair_at(directory)
            else:
                directory = sessions_root + "/" + sid
                on_disk = _pair_at(directory)
                if not on_disk and _pair_at(persistent_root + "/" + sid):
                    directory, name, on_disk = persistent_root + "/" + sid, sid, True
        if flt.with_db and not on_disk:
            return False
        out.append(ListedSession(SessionRow.from_tuple(raw), name,
                                 None if directory is None else Path(directory), on_disk))
        return len(out) >= flt.limit

    try:
        conds, params = _where(flt)
        order = " ORDER BY s.created_at DESC, s.id DESC"
        where = (" WHERE " + " AND ".join(conds)) if conds else ""
        probe = flt.limit if not flt.with_db else max(flt.limit, _WITH_DB_PROBE_ROWS)
        seen = 0
        for raw in conn.execute(f"{select}{where}{order} LIMIT ?", (*params, probe)):
            seen += 1
            if take(raw):
                return out
        if not flt.with_db or seen < probe or last is None:
            return out
        # Driven from the directories (key lookups, then a sort of those rows only), so the
        # cost follows the ledgers on disk, not the size of main.db. A persistent directory
        # stands for its linked id, or for itself when the VM is named by its id.
        ids = set(_directory_names(layout.sessions_root))
        ids.update(links.get(n, n) for n in _directory_names(layout.persistent_root))
        rest = "".join(f" AND {c}" for c in conds) + " AND (+s.created_at, +s.id) < (?, ?)"
        sql = f"{select} WHERE s.id IN (SELECT value FROM json_each(?)){rest}{order}"
        for raw in conn.execute(sql, (json.dumps(sorted(ids)), *params, *last)):
            if take(raw):
                break
        return out
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot list sessions: {exc}", path) from exc
    finally:
        conn.close()

def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_created(created_at: str | None) -> str:
    """``MM-DD HH:MM:SS``; the first 16 characters of the raw text when it does not parse."""
    raw = created_at or ""
    try:
        return _parse_time(raw).strftime("%m-%d %H:%M:%S")
    except (ValueError, TypeError):
        return raw[:16]


def format_duration(created_at: str | None, stopped_at: str | None, status: str | None) -> str:
    """``running`` / ``?`` without both times; else ``{s}s``, ``{m}m{s}s`` or ``{h}h{m}m``."""
    if not stopped_at or not created_at:
        return "running" if status == "running" else "?"
    try:
        s = int((_parse_time(stopped_at) - _parse_time(created_at)).total_seconds())
    except (ValueError, TypeError, OverflowError):
        return "?"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    return f"{s // 3600}h{(s % 3600) // 60}m"


_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"

# main.db and ledgers are data, not trusted text: control characters (escape sequences,

_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
LIST_FOOTER = "* = session.db on disk (queryable)"


def list_header() -> str:
    """The doctor's header, with the VM name as a trailing column."""
    return (f"{'ID':<36}  {'Created':>16}  {'Dur':>6}  {'Cost':>7}  {'net':>5}  "
            f"{'tokens':>7}  {'tool':>5}  {'fs':>5}  Name")


def format_list_row(item: ListedSession) -> str:
    """The doctor's row (every string from main.db through ``sanitize``), then the name."""
    r = item.row
    marker = "*" if item.has_ledger else " "
    line = (f"{sanitize(r.id):<36}{marker} {sanitize(format_created(r.created_at)):>16}  "
            f"{format_duration(r.created_at, r.stopped_at, r.status):>6}  "
            f"${r.total_estimated_cost:>6.2f}  {r.total_requests:>5}  {r.total_tokens:>7}  "
            f"{r.total_tool_calls:>5}  {r.total_file_events:>5}")
    return f"{line}  {sanitize(item.name)}" if item.name else line


def format_list(items: Sequence[ListedSession], colour: bool = False) -> list[str]:
    """The text lines of ``list`` (header, rule, rows, blank, footer)."""
    bold, dim, reset = (_BOLD, _DIM, _RESET) if colour else ("", "", "")
    header = list_header()
    lines = [f"{bold}{header}{reset}", f"{dim}{'-' * len(header)}{reset}"]
    lines.extend(format_list_row(i) for i in items)
    lines.extend(["", f"{dim}{LIST_FOOTER}{reset}"])
    return lines


def listed_json(item: ListedSession) -> dict[str, object]:
    """One ``list --json`` object: the doctor's main.db columns raw, the VM name, the
    formatted cells, the ledger."""
    r = item.row
    obj: dict[str, object] = asdict(r)
    obj["name"] = item.name
    obj["total_tokens"] = r.total_tokens
    obj["has_ledger"] = item.has_ledger
    obj["ledger_dir"] = str(item.directory) if item.has_ledger and item.directory is not None else None
    obj["formatted"] = {
        "created": format_created(r.created_at),
        "duration": format_duration(r.created_at, r.stopped_at, r.status),
        "cost": f"${r.total_estimated_cost:.2f}",
        "net": str(r.total_requests),
        "tokens": str(r.total_tokens),
        "tool": str(r.total_tool_calls),
        "fs": str(r.total_file_events),
    }
    return obj

def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _cost(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite amount of at least 0")
    return value


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=_count, default=10, metavar="N", help="show at most N sessions (default 10)")
    parser.add_argument("--with-model", action="store_true", help="only sessions with AI model calls")
    parser.add_argument("--with-db", action="store_true",
                        help="only sessions whose ledger is still on disk (applied before -n)")
    parser.add_argument("--with-net", action="store_true", help="only sessions with network events")
    parser.add_argument("--with-tools", action="store_true", help="only sessions with tool calls")
    parser.add_argument("--min-cost", type=_cost, default=0.0, metavar="X",
                        help="only sessions that cost at least X dollars")
    parser.add_argument("--status", default=None, metavar="STATUS", help="only sessions with this status")
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")



def run_list(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    layout = home_layout()
    if not layout.main_db.exists():
        print(f"No main.db found at {layout.main_db}", file=err)
        return 1
    flt = ListFilter(limit=args.n, with_model=args.with_model, with_db=args.with_db, with_net=args.with_net,
                     with_tools=args.with_tools, min_cost=args.min_cost, status=args.status)
    items = list_sessions(flt, home=layout)
    if args.json:
        json.dump([listed_json(i) for i in items], out, indent=2)
        out.write("\n")
        return 0
    if not items:
        print("No sessions found", file=out)
        return 0
    out.write("\n".join(format_list(items, colour_wanted(out))) + "\n")
    return 0


# --- rollup command ------------------------------------------------------------------------

def add_rollup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", default=None,
                        help="session id or VM name (default: the latest session in main.db)")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON")


def _totals_lines(ref: SessionRef, totals: SessionTotals) -> Iterator[str]:
    yield f"Rolled up {sanitize(ref.label)} from {sanitize(ref.db_path)}"
    yield f"  requests     {totals.total_requests} ({totals.allowed_requests} allowed, {totals.denied_requests} denied)"
    yield f"  tokens       {totals.total_input_tokens} in + {totals.total_output_tokens} out"
    yield f"  cost         ${totals.total_estimated_cost:.4f}"
    mcp = "" if totals.mcp_calls is None else f" ({totals.mcp_calls} mcp, counted from the ledger)"
    yield f"  tool calls   {totals.total_tool_calls}{mcp}"
    yield f"  file events  {totals.total_file_events}"
    if totals.exec_count is not None:
        yield f"  exec events  {totals.exec_count}"
    if totals.audit_event_count is not None:
        yield f"  audit events {totals.audit_event_count}"


def run_rollup(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    out = sys.stdout if stdout is None else stdout
    layout = home_layout()
    ref = resolve_session(args.session, home=layout)
    if ref.id is None:
        raise LedgerError(f"persistent VM {ref.name} is not recorded in main.db, so it has no totals to roll up",
                          layout.main_db)
    totals = rollup(layout.main_db, ref.id, ref.db_path)
    if args.json:
        obj = asdict(totals)
        obj.update(name=ref.name, ledger=str(ref.db_path))
        json.dump(obj, out, indent=2)
        out.write("\n")
    else:
        out.write("\n".join(_totals_lines(ref, totals)) + "\n")
    return 0


def vm_name(session_id: str, *, home: Home | os.PathLike[str] | str | None = None) -> str | None:
    """The persistent VM name of a session recorded in main.db, or None for an ephemeral one
    (from capsem-core's sidecar, else ``persistent/<id>`` when that directory exists)."""
    layout = home_layout(home)
    if session_word_problem(session_id) is not None:
        return None
    by_id = vmnames.names_by_id(vmnames.read_links(layout.main_db))
    try:
        return locate_ledger(layout, session_id, by_id)[2]
    except SymlinkRefused:
        return None
