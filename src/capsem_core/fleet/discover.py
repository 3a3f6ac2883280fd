"""Finding the ledgers of a fleet: a Capsem home's run directory, and directory trees.

A home's ledgers are the directories under ``run/sessions/`` (ephemeral, named by their
session id) and ``run/persistent/`` (named VMs, their id from main.db or capsem-core's
sidecar). A tree given with ``--path`` is searched for ledger directories (a directory
holding ``session.db`` or ``session.bodies``); a home met inside a tree is read as a home,
so its sessions keep their ids and names. Symbolic links are never followed (so a tree
cannot loop through one) and a directory reached twice (a bind mount of itself) is read
once, each a note, never silent. A ledger seen through two ways in (the home and a tree
holding it) is checked once.

Every directory the search finds or is given and does not check is accounted for as an
``Unchecked``: one it cannot look into or list ("unreadable", with the OS's reason: a
permission error is never taken for "no ledger here"), one whose directories lie deeper than
``max_depth`` or whose entries pass ``MAX_DIR_ENTRIES`` ("not searched": ledgers may lie
there unchecked), a ``--path`` that does not exist ("missing") or is not searched
("refused": a symbolic link, a file other than session.db), and a home's session directory,
or a given tree, holding no ledger ("not a ledger"). All but "not a ledger" make a fleet
run's exit status 1 (``FleetReport.sound``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from capsem_core.paths import SESSION_BODIES, SESSION_DB
from capsem_core.sessions import vmnames
from capsem_core.sessions.home import Home, home_layout, is_session_word
from capsem_core.sessions.maindb import session_recorded

# Deeper than any layout of homes on shared storage needs (a home's ledgers sit three levels
# below it, run/sessions/<id>), shallow enough that a pathological tree ends the search quickly.
MAX_TREE_DEPTH = 16
# A directory with more entries than this is not searched past them ("not searched"): a
# ledger tree has dozens to thousands of sessions per directory, not millions.
MAX_DIR_ENTRIES = 1_000_000

Kind = Literal["ephemeral", "persistent", "directory"]
UNREADABLE, MISSING, REFUSED, NOT_A_LEDGER = "unreadable", "missing", "refused", "not a ledger"
NOT_SEARCHED = "not searched"
Status = str  # one of UNREADABLE, NOT_SEARCHED, MISSING, REFUSED, NOT_A_LEDGER


@dataclass(frozen=True, slots=True)
class FleetLedger:
    """One ledger of a fleet run: where it is, what names it, and its size when found.

    ``kind`` is "ephemeral" or "persistent" for a home's ledgers, "directory" for one found
    in a tree outside any home. ``session_id`` is None when it cannot be known (a persistent
    VM main.db does not record, a directory outside a home); ``size`` is the bytes of
    session.db, its -wal and session.bodies, ``archive_size`` those of session.bodies.
    ``main_db`` is the home's main.db for a home's ledger (its check compares the totals
    main.db records, as ``check SESSION`` does), None outside a home."""

    directory: Path
    kind: Kind
    session_id: str | None = None
    name: str | None = None
    size: int = 0
    archive_size: int = 0
    main_db: Path | None = None

    @property
    def db_path(self) -> Path:
        return self.directory / SESSION_DB

    @property
    def label(self) -> str:
        """How a person knows the session: ``name (id)``, or whichever is known, or the
        directory's name."""
        if self.name and self.session_id and self.name != self.session_id:
            return f"{self.name} ({self.session_id})"
        return self.name or self.session_id or self.directory.name


@dataclass(frozen=True, slots=True)
class Unchecked:
    """A directory found or given (``given``: a ``--path`` itself) that was not checked, and
    why: ``status`` (see the module docstring), ``reason`` worded for a person, and for an
    OS error its symbolic name (``errno``: "EACCES", ...)."""

    path: Path
    status: Status
    reason: str
    given: bool = False
    errno: str | None = None

    @property
    def fails(self) -> bool:
        """True when the run cannot say the fleet is sound because of it."""
        return self.status != NOT_A_LEDGER

    def to_json(self) -> dict[str, str | bool | None]:
        return {"path": str(self.path), "status": self.status, "reason": self.reason, "given": self.given,
                "errno": self.errno}


def _unreadable(path: Path, exc: OSError, doing: str, given: bool = False) -> Unchecked:
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    return Unchecked(path, UNREADABLE, f"{doing}: {exc.strerror or exc}", given, name)


@dataclass(slots=True)
class Discovery:
    """The ledgers found (in path order), the directories found or given and not checked
    (``unchecked``), and notes on what the search passed over, worded for a person."""

    ledgers: list[FleetLedger] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reached: int = 0                    # ledgers added, those already seen included
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def add(self, ledger: FleetLedger) -> None:
        self.reached += 1
        key = _identity(ledger.directory)
        if key is not None:
            if key in self._seen:
                return
            self._seen.add(key)
        self.ledgers.append(ledger)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _file_size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _sized(directory: Path, kind: Kind, session_id: str | None, name: str | None,
           main_db: Path | None = None) -> FleetLedger:
    archive = _file_size(directory / SESSION_BODIES)
    size = _file_size(directory / SESSION_DB) + _file_size(directory / f"{SESSION_DB}-wal") + archive
    return FleetLedger(directory, kind, session_id, name, size, archive, main_db)


def _holds_ledger(directory: Path) -> bool:
    """Either half of the pair is there (a link too: the check then refuses it by name).
    Raises the OSError of a directory that cannot be looked into (no search permission):
    not being able to look is not the same as finding nothing."""
    for name in (SESSION_DB, SESSION_BODIES):
        try:
            os.lstat(directory / name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        return True
    return False


def _looked_into(directory: Path, found: Discovery) -> bool | None:
    """``_holds_ledger``, or None (the directory recorded as unreadable) when it cannot be
    looked into."""
    try:
        return _holds_ledger(directory)
    except OSError as exc:
        found.unchecked.append(_unreadable(directory, exc, "cannot be looked into"))
        return None


def _entries(directory: Path, found: Discovery) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            out = []
            for entry in it:
                out.append(entry)
                if len(out) >= MAX_DIR_ENTRIES:
                    found.unchecked.append(Unchecked(directory, NOT_SEARCHED, f"more than {MAX_DIR_ENTRIES:,} "
                                                     "entries: the rest not searched"))
                    break
    except FileNotFoundError:
        return []
    except OSError as exc:
        found.unchecked.append(_unreadable(directory, exc, "cannot be listed"))
        return []
    return sorted(out, key=lambda e: e.name)


def _home_entry(entry: os.DirEntry[str], found: Discovery) -> bool:
    """True when a home's session entry is to be checked (a link is: its check refuses it by
    name); else it is accounted for as unreadable or not a ledger."""
    directory = Path(entry.path)
    try:
        if entry.is_symlink():
            return True
        is_dir = entry.is_dir(follow_symlinks=False)
    except OSError as exc:
        found.unchecked.append(_unreadable(directory, exc, "cannot be looked into"))
        return False
    if not is_dir:
        found.unchecked.append(Unchecked(directory, NOT_A_LEDGER, "not a directory"))
        return False
    held = _looked_into(directory, found)
    if held is False:
        found.unchecked.append(Unchecked(directory, NOT_A_LEDGER, "holds neither session.db nor session.bodies "
                                                                  "(a session being set up?)"))
    return held is True


def discover_home(home: Home | os.PathLike[str] | str | None = None, found: Discovery | None = None, *,
                  in_tree: bool = False) -> Discovery:
    """Every ledger directory of a home's run directory (``home=None``: the one
    ``CAPSEM_HOME`` / ``CAPSEM_RUN_DIR`` name). A session directory that is a symbolic link
    is listed (its check refuses it by name); one holding neither half of a ledger is not a
    ledger (a session being set up) is accounted for as "not a ledger", and one that cannot be
    looked into as "unreadable". ``in_tree``: a home met in a ``--path`` tree, whose
    ``run/sessions`` or ``run/persistent`` is not read through a symbolic link (noted), as the
    tree walk follows none."""
    found = Discovery() if found is None else found
    layout = home_layout(home)
    linked = {root for root in (layout.sessions_root, layout.persistent_root) if in_tree and os.path.islink(root)}
    found.notes += [f"{os.path.abspath(root)}: a symbolic link, not followed" for root in sorted(linked)]

    def listed(root: Path) -> list[os.DirEntry[str]]:
        return [] if root in linked else _entries(Path(os.path.abspath(root)), found)

    # Absolute: a task names its ledger to a worker, whose working directory (on another
    # machine, with Dask) is not this one's.
    main_db = Path(os.path.abspath(layout.main_db))
    links = vmnames.read_links(main_db) if main_db.exists() else {}
    by_id = vmnames.names_by_id(links)
    for entry in listed(layout.sessions_root):
        directory = Path(entry.path)
        if _home_entry(entry, found):
            word = entry.name if is_session_word(entry.name) else None
            found.add(_sized(directory, "ephemeral", word, by_id.get(word) if word else None, main_db))
    for entry in listed(layout.persistent_root):
        directory = Path(entry.path)
        if _home_entry(entry, found):
            name = entry.name
            session_id = links.get(name)
            if session_id is None and is_session_word(name) and main_db.exists() and session_recorded(main_db, name):
                session_id = name  # a VM named by its id (Capsem's doctor assumes as much)
            found.add(_sized(directory, "persistent", session_id, name, main_db))
    return found


def _is_home(directory: Path) -> bool:
    """A home as a tree walk meets it: ``sessions/main.db`` a file and ``run`` a directory,
    neither reached through a symbolic link (the walk follows none)."""
    try:
        sessions = os.lstat(directory / "sessions")
        main_db = os.lstat(directory / "sessions" / "main.db")
        run = os.lstat(directory / "run")
    except OSError:
        return False
    return stat.S_ISDIR(sessions.st_mode) and stat.S_ISREG(main_db.st_mode) and stat.S_ISDIR(run.st_mode)


def discover_tree(root: os.PathLike[str] | str, found: Discovery | None = None, *,
                  max_depth: int = MAX_TREE_DEPTH) -> Discovery:
    """Every ledger under ``root`` (itself a ledger directory, a ``session.db``, a home, or a
    tree holding any of them), not following symbolic links, at most ``max_depth`` levels
    down. A ledger directory is not searched further. A root that does not exist, cannot be
    read or is not searched, and a tree holding no ledger, is an ``Unchecked`` of its own."""
    found = Discovery() if found is None else found
    root = Path(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        found.unchecked.append(Unchecked(root, MISSING, "does not exist", True, "ENOENT"))
        return found
    except OSError as exc:
        found.unchecked.append(_unreadable(root, exc, "cannot be looked at", given=True))
        return found
    if stat.S_ISLNK(st.st_mode):
        found.unchecked.append(Unchecked(root, REFUSED, "a symbolic link, not followed (give the directory it "
                                                        "names)", True))
        return found
    if stat.S_ISREG(st.st_mode) and root.name == SESSION_DB:
        found.add(_sized(root.parent, "directory", None, None))
        return found
    if not stat.S_ISDIR(st.st_mode):
        found.unchecked.append(Unchecked(root, REFUSED, "neither a directory nor a session.db", True))
        return found
    visited: set[tuple[int, int]] = set()
    reached, unreadable = found.reached, len(found.unchecked)
    _walk(root, 0, max_depth, visited, found)
    if found.reached == reached and not any(u.fails for u in found.unchecked[unreadable:]):
        found.unchecked.append(Unchecked(root, NOT_A_LEDGER, "no ledger found under it", True))
    return found


def _walk(directory: Path, depth: int, max_depth: int, visited: set[tuple[int, int]], found: Discovery) -> None:
    key = _identity(directory)
    if key is not None:
        if key in visited:
            found.notes.append(f"{directory}: reached twice (a mount of a directory inside itself?); read once")
            return
        visited.add(key)
    held = _looked_into(directory, found)
    if held is None:
        return
    if held:
        parent = directory.parent.name
        word = directory.name if is_session_word(directory.name) else None
        if parent == "sessions" and word is not None:
            found.add(_sized(directory, "ephemeral", word, None))
        elif parent == "persistent":
            found.add(_sized(directory, "persistent", None, directory.name))
        else:
            found.add(_sized(directory, "directory", None, None))
        return
    if _is_home(directory):
        discover_home(directory, found, in_tree=True)
        # Its run directory is read as the home's; the rest of the home may hold other trees.
        skip = {"run"}
    else:
        skip = set()
    links = 0
    for entry in _entries(directory, found):
        if entry.name in skip:
            continue
        try:
            if entry.is_symlink():
                links += 1
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError as exc:
            found.unchecked.append(_unreadable(Path(entry.path), exc, "cannot be looked into"))
            continue
        if depth + 1 > max_depth:
            found.unchecked.append(Unchecked(directory, NOT_SEARCHED, f"its directories lie deeper than {max_depth} "
                                             "levels: not searched"))
            return
        _walk(Path(entry.path), depth + 1, max_depth, visited, found)
    if links:
        found.notes.append(f"{directory}: {links} symbolic link{'s' if links != 1 else ''} not followed")


def discover(paths: Iterable[os.PathLike[str] | str] = (), *,
             home: Home | os.PathLike[str] | str | bool = False, max_depth: int = MAX_TREE_DEPTH) -> Discovery:
    """The ledgers of a fleet run: a home's (``home=True``: the environment's; a path or a
    Home: that one) and every tree of ``paths``, each ledger once."""
    found = Discovery()
    if home is not False:
        discover_home(None if home is True else home, found)
    for path in paths:
        # Absolute, as the home's: a worker elsewhere resolves nothing against this directory.
        discover_tree(os.path.abspath(path), found, max_depth=max_depth)
    # A directory reached two ways (the home and a --path holding it) is counted once, as its
    # ledgers are.
    seen: set[object] = set()
    unique = []
    for item in found.unchecked:
        key = (_identity(item.path) or os.path.normpath(item.path), item.status)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    found.unchecked = unique
    return found


__all__ = ["MAX_TREE_DEPTH", "MISSING", "NOT_A_LEDGER", "NOT_SEARCHED", "REFUSED", "UNREADABLE", "Discovery",
           "FleetLedger", "Kind", "Status", "Unchecked", "discover", "discover_home", "discover_tree"]
