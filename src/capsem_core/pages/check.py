"""The page check of session.db: ``PRAGMA quick_check``'s verdict, in pieces every core can run.

A whole-file ``PRAGMA quick_check`` is one long single-threaded pass. It is split here in two
halves that together see everything it sees:

* ``PRAGMA main.quick_check('TABLE')`` for every table (and ``sqlite_schema``, whose check
  includes the freelist's), each checking its b-trees and their rows in full, each a job of
  its own on any connection of the check's snapshot (``quick_check_lines``; ``jobs`` gives
  their costs, so the largest start first);
* the native page map (``capsem_core._native._pages``), the whole-file checks a per-table
  check leaves out: the freelist's trunk and leaf pages, every page used exactly once (by
  one tree, its overflow chains, the freelist, the pointer map or the lock-byte page), the
  root pages' pointer-map entries, read from session.db's own bytes (``walk``).

Both halves must read the check's snapshot. They do when that snapshot is the database file
itself (``Snapshot.pages`` is set: no ``-wal`` holds a page, so every connection's snapshot is
the file, which cannot change while they are held). When a ``-wal`` holds pages, the file is
not the snapshot, and the check falls back to one whole-file ``PRAGMA quick_check`` on a
connection of its own (``WHOLE_FILE``), as SQLite itself reads it. The check says which.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from capsem_core._native import _pages
from capsem_core.pages.words import walk_lines

PER_TABLE, WHOLE_FILE = "per_table", "whole_file"
# The page map costs about a seventh of quick_check per page; its place in the largest-first
# order is that share of all pages.
WALK_COST_PER_PAGE = 0.15
_DAMAGE_ERRORS = frozenset({"SQLITE_CORRUPT", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE",
                            "SQLITE_CORRUPT_VTAB", "SQLITE_NOTADB"})
SCHEMA_TABLE = "sqlite_schema"


def damage_lines(exc: sqlite3.DatabaseError | UnicodeDecodeError) -> list[str]:
    """SQLite's own error when it is damage (corrupt, not a database); else re-raises it: a
    lock or an I/O failure is not a verdict on the pages. An error the sqlite3 module cannot
    decode quotes the file's own broken bytes (a malformed schema's name): damage too, in
    SQLite's words as far as they read."""
    if isinstance(exc, UnicodeDecodeError):
        return [bytes(exc.object).decode("utf-8", "replace")]
    if getattr(exc, "sqlite_errorname", "") not in _DAMAGE_ERRORS:
        raise exc
    return [str(exc)]


def quick_check_lines(conn: sqlite3.Connection, table: str | None = None) -> list[str]:
    """``PRAGMA quick_check`` (of one table when ``table`` is given): its lines, ``["ok"]``
    when sound. A damaged file SQLite refuses to read gives its error as the one line."""
    sql = "PRAGMA quick_check" if table is None else "PRAGMA main.quick_check(" + _quote(table) + ")"
    # A damaged file's lines may quote bytes that are not UTF-8 (a name in a broken record).
    factory = conn.text_factory
    conn.text_factory = _lenient_text
    try:
        return [str(r[0]) for r in conn.execute(sql)]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return damage_lines(exc)
    finally:
        conn.text_factory = factory


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Schema(NamedTuple):
    """What the page check needs of sqlite_schema: the tables, every tree's root page, its
    name for the page map's words, and the table whose per-table check covers it."""

    tables: tuple[str, ...]
    roots: tuple[int, ...]
    names: dict[int, str]      # root page -> "table t" / "index i"
    table_of: tuple[str, ...]  # per root


def read_schema(conn: sqlite3.Connection) -> Schema:
    """sqlite_schema as the page check reads it; raises sqlite3.DatabaseError (or
    UnicodeDecodeError) when it cannot be read: ``damage_lines`` says whether that is damage."""
    factory = conn.text_factory
    conn.text_factory = _lenient_text
    try:
        rows = conn.execute("SELECT type, name, tbl_name, rootpage FROM sqlite_schema").fetchall()
    finally:
        conn.text_factory = factory
    tables = [str(name) for kind, name, _t, _r in rows if kind == "table"]
    roots, table_of, names = [1], [SCHEMA_TABLE], {1: f"table {SCHEMA_TABLE}"}
    for kind, name, tbl_name, rootpage in rows:
        # Views and triggers have no tree (rootpage 0), virtual tables none of their own.
        if isinstance(rootpage, int) and not isinstance(rootpage, bool) and 0 < rootpage <= 0xFFFFFFFF:
            roots.append(rootpage)
            table_of.append(str(tbl_name))
            names.setdefault(rootpage, f"{kind} {name}")
    return Schema(tuple(tables), tuple(roots), names, tuple(table_of))


def jobs(pages: _pages.PageFile, schema: Schema) -> list[tuple[str | None, float]]:
    """The per-table checks and the page map (None) with their costs, largest first."""
    sizes: dict[str, float] = {name: 0.0 for name in schema.tables}
    sizes[SCHEMA_TABLE] = 0.0
    for table, size in zip(schema.table_of, pages.estimate(schema.roots)):
        if table in sizes:
            sizes[table] += size
    header = pages.header() or {}
    out: list[tuple[str | None, float]] = [(name, cost) for name, cost in sizes.items()]
    out.append((None, WALK_COST_PER_PAGE * header.get("page_count", 0)))
    return sorted(out, key=lambda job: -job[1])


def walk(pages: _pages.PageFile, schema: Schema) -> _pages.Walk:
    """The page map: every page of the mapped file given one owner (GIL released)."""
    return pages.walk(list(schema.roots))


def verdict_lines(table_lines: list[list[str]], page_map: _pages.Walk | None, schema: Schema | None) -> list[str]:
    """Every damage line of the per-table checks, then the page map's whole-file findings
    (its findings inside one tree are that tree's quick_check's to word: shown only when
    those checks said nothing, which they never should); ``["ok"]`` when sound."""
    lines = [line for each in table_lines for line in each if line != "ok"]
    if page_map is not None and schema is not None:
        lines += walk_lines(page_map, schema.names, in_tree=not lines)
    return lines or ["ok"]


def pages_walked(page_map: _pages.Walk) -> int:
    return int(page_map.btree_pages + page_map.overflow_pages + page_map.freelist_pages)


__all__ = ["PER_TABLE", "SCHEMA_TABLE", "WALK_COST_PER_PAGE", "WHOLE_FILE", "Schema", "damage_lines", "jobs",
           "pages_walked", "quick_check_lines", "read_schema", "verdict_lines", "walk"]
