"""Session identity: the one resolver from a word (session id or VM name) to a ledger
directory, which ``check``, ``rollup``, ``body``, ``events``, ``export`` and the Python API
use (``list`` finds its directories itself, ``listing.py``), and the registration that records
an id with its VM name.

Identity rule (the ledger's invariant): a session id is opaque and names the ephemeral
ledger directory ``run/sessions/<id>/``; a persistent VM's ledger is
``run/persistent/<name>/``. Capsem's main.db records no name: a VM whose directory name is
its id needs nothing more (as Capsem's doctor assumes), and a name that differs from its id
is linked to it by capsem-core's sidecar (:mod:`capsem_core.sessions.vmnames`). A name is
never assumed to equal an id, and an id always wins over an equal name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from capsem_core.errors import LedgerError, SymlinkRefused
from capsem_core.paths import (
    SESSION_BODIES, SESSION_DB, is_real_dir, is_regular_file, pair_on_disk, refuse_symlink,
)
from capsem_core.sessions import vmnames
from capsem_core.sessions.home import Home, check_session_word, home_layout, session_word_problem
from capsem_core.sessions.maindb import insert_session, latest_session_id, now_text, session_recorded

Kind = Literal["ephemeral", "persistent"]


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


def _refuse_link_dir(directory: Path, word: str) -> None:
    refuse_symlink(directory, "ledger directory",
                   message=f"refusing session {word}: its ledger directory is a symbolic link")


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
    if is_real_dir(ephemeral):
        return ephemeral, "ephemeral", None
    persistent = layout.persistent_root / session_id
    _refuse_link_dir(persistent, session_id)
    if is_real_dir(persistent):
        return persistent, "persistent", session_id
    return ephemeral, "ephemeral", None


def _recorded_ref(layout: Home, session_id: str, links_by_id: Mapping[str, str]) -> SessionRef:
    problem = session_word_problem(session_id)
    if problem is not None:
        raise LedgerError(f"main.db records session {session_id!r}, which cannot name a directory: {problem}",
                          layout.main_db)
    directory, kind, name = locate_ledger(layout, session_id, links_by_id)
    return SessionRef(session_id, name, directory, kind, pair_on_disk(directory))


def _unrecorded_ref(layout: Home, word: str, links: Mapping[str, str]) -> SessionRef | None:
    """A word main.db does not record: a linked name, else a directory found on disk."""
    if word in links:
        directory = layout.persistent_root / word
        _refuse_link_dir(directory, word)
        return SessionRef(links[word], word, directory, "persistent", pair_on_disk(directory))
    ephemeral = layout.sessions_root / word
    _refuse_link_dir(ephemeral, word)
    if is_real_dir(ephemeral):
        return SessionRef(word, None, ephemeral, "ephemeral", pair_on_disk(ephemeral))
    persistent = layout.persistent_root / word
    _refuse_link_dir(persistent, word)
    if is_real_dir(persistent):
        return SessionRef(None, word, persistent, "persistent", pair_on_disk(persistent))
    return None


def resolve_session(word: str | None, *, home: Home | os.PathLike[str] | str | None = None,
                    require_db: bool = True) -> SessionRef:
    """Turn a session id, a VM name, or None (the latest session) into a SessionRef.

    Order: an id recorded in main.db; else a name linked in capsem-core's sidecar; else an
    ephemeral directory ``run/sessions/<word>/`` (directory names there are ids); else a
    persistent directory ``run/persistent/<word>/`` (a name, id unknown). A word that could
    escape its directory is refused before anything is looked up. With ``require_db`` (the
    default) a session whose ``session.db`` is not on disk is an error "session.db not
    found for <word>" naming where it was looked for."""
    layout = home_layout(home)
    if word is not None:
        check_session_word(word)
    main_db = layout.main_db
    ref: SessionRef | None
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
    elif has_main_db and session_recorded(main_db, word):
        ref = _recorded_ref(layout, word, by_id)
    else:
        ref = _unrecorded_ref(layout, word, links)
        if ref is None:
            where = "main.db records no such session" if has_main_db else f"there is no main.db at {main_db}"
            raise LedgerError(f"session.db not found for {word} ({where}, and neither "
                              f"{layout.sessions_root / word} nor {layout.persistent_root / word} exists)")
    if require_db:
        refuse_symlink(ref.db_path, SESSION_DB)
        if not is_regular_file(ref.db_path):
            raise LedgerError(f"session.db not found for {word}", ref.db_path)
    return ref


def ledger_exists(ref: SessionRef) -> bool:
    """True when ``session.db`` and ``session.bodies`` are really on disk, as regular files
    (not links) in ``ref.directory`` (itself not a link). Looks again; ``ref.has_ledger`` is
    what was seen at resolve time."""
    return pair_on_disk(ref.directory)


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
