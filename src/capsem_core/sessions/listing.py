"""Listing sessions: main.db's rows newest first, filtered, each with where its ledger is and
whether it is on disk (the doctor's text and JSON forms of the list are the command line's:
``capsem_core.cli.sessions``).

The filters are SQL over main.db; ``--with-db`` is a look at the disk, applied before the
limit without a stat per row of a large main.db (see ``list_sessions``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capsem_core.errors import LedgerError
from capsem_core.paths import pair_on_disk
from capsem_core.sessions import vmnames
from capsem_core.sessions.home import Home, home_layout, is_session_word, session_word_problem
from capsem_core.sessions.maindb import (
    CREATED_AT_COLUMN, ID_COLUMN, LIST_COLUMNS, SessionRow, open_main_db, select_rows_sql,
)


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
    """One listed row: main.db's columns, the VM name, the ledger directory and whether the
    pair is on disk there."""

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
            return [e.name for e in entries if e.is_dir(follow_symlinks=False) and is_session_word(e.name)]
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


def _bound(value: object) -> tuple[str, object]:
    """The placeholder and parameter that give back ``value`` as it was read: a str holding
    surrogates (TEXT that is not UTF-8, read by ``db.exact_text``) cannot be bound as a str,
    so its exact bytes are bound and cast back to TEXT."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "CAST(? AS TEXT)", value.encode("utf-8", "surrogateescape")
    return "?", value


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
    # Strings, not Paths: these are joined once per row.
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
                on_disk = pair_on_disk(directory)
            else:
                directory = sessions_root + "/" + sid
                on_disk = pair_on_disk(directory)
                if not on_disk and pair_on_disk(persistent_root + "/" + sid):
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
        (at_sql, at), (id_sql, sid) = _bound(last[0]), _bound(last[1])
        rest = "".join(f" AND {c}" for c in conds) + f" AND (+s.created_at, +s.id) < ({at_sql}, {id_sql})"
        sql = f"{select} WHERE s.id IN (SELECT value FROM json_each(?)){rest}{order}"
        for raw in conn.execute(sql, (json.dumps(sorted(ids)), *params, at, sid)):
            if take(raw):
                break
        return out
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot list sessions: {exc}", path) from exc
    finally:
        conn.close()


__all__ = ["ListFilter", "ListedSession", "list_sessions"]
