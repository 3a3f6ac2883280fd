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

The page map also holds each tree to every test the per-table check applies to it (each
page's header, freeblocks, cells and bytes; the pages' depths, key ranges and overflow chains;
each row's NOT NULL columns and its values' kinds against the columns' affinities), more
strictly where that is simpler. A table whose trees all pass needs no ``quick_check`` of its
own: it would say "ok" (``proved``). Any other table, and sqlite_schema (whose check also
words the freelist), is checked by SQLite, whose words the report gives. A read-only
connection does not load CHECK constraints, so the per-table check tests none, and neither
does the page map. What the page map may prove is what ``Schema.rules`` allows: a rowid
table, not STRICT, with no generated column and at most 64 columns.

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
from capsem_core.pages.tables import affinity
from capsem_core.pages.words import walk_lines

PER_TABLE, WHOLE_FILE = "per_table", "whole_file"
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


# (fields, not_null, null, no_number, no_text): see _pages.PageFile.walk.
Rule = tuple[int, int, int, int, int]
INDEX_RULE: Rule = (0, 0, 0, 0, 0)
MAX_RULE_COLUMNS = 64


class Schema(NamedTuple):
    """What the page check needs of sqlite_schema: the tables, every tree's root page, its
    name for the page map's words, the table whose per-table check covers it, and what the
    page map holds the tree to (``_pages.PageFile.walk``'s rules; None: left to SQLite)."""

    tables: tuple[str, ...]
    roots: tuple[int, ...]
    names: dict[int, str]      # root page -> "table t" / "index i"
    table_of: tuple[str, ...]  # per root
    rules: tuple[Rule | None, ...] = ()  # per root


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
    kinds: list[str] = ["table"]
    for kind, name, tbl_name, rootpage in rows:
        # Views and triggers have no tree (rootpage 0), virtual tables none of their own.
        if isinstance(rootpage, int) and not isinstance(rootpage, bool) and 0 < rootpage <= 0xFFFFFFFF:
            roots.append(rootpage)
            table_of.append(str(tbl_name))
            names.setdefault(rootpage, f"{kind} {name}")
            kinds.append(str(kind))
    table_rules = _table_rules(conn)
    rules = tuple(None if table == SCHEMA_TABLE else INDEX_RULE if kind == "index" else table_rules.get(table)
                  for table, kind in zip(table_of, kinds))
    return Schema(tuple(tables), tuple(roots), names, tuple(table_of), rules)


def _table_rules(conn: sqlite3.Connection) -> dict[str, Rule]:
    """The rule of each table the page map may prove: a rowid table, not STRICT, every column
    stored (no generated one), at most 64 columns. The rowid's alias (a lone INTEGER PRIMARY
    KEY) must be NULL in every record; were it not the alias after all, the records hold its
    values and the table goes to SQLite. None of them where this SQLite cannot say."""
    try:
        listed = conn.execute("SELECT name, type, wr, strict FROM pragma_table_list WHERE schema = 'main'").fetchall()
        columns = conn.execute(
            "SELECT m.name, c.cid, c.type, c.\"notnull\", c.pk, c.hidden FROM sqlite_schema AS m, "
            "pragma_table_xinfo(m.name, 'main') AS c WHERE m.type = 'table' ORDER BY m.name, c.cid").fetchall()
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return {}
    eligible = {str(name) for name, kind, wr, strict in listed if kind == "table" and not wr and not strict}
    by_table: dict[str, list[tuple[int, str, int, int, int]]] = {}
    for name, cid, declared, not_null, pk, hidden in columns:
        by_table.setdefault(str(name), []).append((int(cid), str(declared or ""), int(not_null), int(pk), int(hidden)))
    rules: dict[str, Rule] = {}
    for name, cols in by_table.items():
        if name not in eligible or len(cols) > MAX_RULE_COLUMNS or any(c[4] for c in cols):
            continue
        keys = [c for c in cols if c[3]]
        not_null = null = no_number = no_text = 0
        for cid, declared, nn, pk, _hidden in cols:
            if len(keys) == 1 and pk and declared.upper() == "INTEGER":
                null |= 1 << cid
                continue
            if nn:
                not_null |= 1 << cid
            kind = affinity(declared)
            if kind == "TEXT":
                no_number |= 1 << cid
            elif kind != "BLOB":
                no_text |= 1 << cid
        rules[name] = (len(cols), not_null, null, no_number, no_text)
    return rules


def provable(schema: Schema) -> frozenset[str]:
    """The tables the page map may prove: every tree of each has a rule (one pass over the
    trees; asked table by table, it cost a check of a small ledger a millisecond)."""
    ruled: set[str] = set()
    unruled: set[str] = set()
    for table, rule in zip(schema.table_of, schema.rules):
        (unruled if rule is None else ruled).add(table)
    return frozenset(ruled - unruled)


def jobs(pages: _pages.PageFile, schema: Schema, proof: frozenset[str]) -> list[tuple[str, float]]:
    """The per-table checks with their costs, largest first, ``proof`` being what
    ``provable(schema)`` gave. Only the tables SQLite checks whatever the page map finds are
    sized, from each tree's left-most path (from a cold cache a few reads at random, which wait
    behind the read-ahead: 0.07-0.5 s on the 1M small sample, before any step could start); a
    table the page map may prove costs 0, its check being "ok" once the page map is done, or
    SQLite's after it."""
    sized = [(root, table) for root, table in zip(schema.roots, schema.table_of) if table not in proof]
    sizes: dict[str, float] = {name: 0.0 for name in schema.tables}
    sizes[SCHEMA_TABLE] = 0.0
    for (_root, table), size in zip(sized, pages.estimate([root for root, _t in sized]) if sized else []):
        if table in sizes:
            sizes[table] += size
    return sorted(sizes.items(), key=lambda job: -job[1])


def walk(pages: _pages.PageFile, schema: Schema) -> _pages.Walk:
    """The page map: every page of the mapped file given one owner, and each tree held to its
    rule (GIL released)."""
    return pages.walk(list(schema.roots), list(schema.rules) if schema.rules else None)


def proved(page_map: _pages.Walk, schema: Schema, table: str) -> bool:
    """Whether the page map proved ``table``'s trees pass every test of its quick_check:
    each of them had a rule and passed it."""
    judged = [(rule, sound) for t, rule, sound in zip(schema.table_of, schema.rules, page_map.sound) if t == table]
    return bool(judged) and all(rule is not None and sound for rule, sound in judged)


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


__all__ = ["INDEX_RULE", "PER_TABLE", "SCHEMA_TABLE", "WHOLE_FILE", "Rule", "Schema", "damage_lines", "jobs",
           "pages_walked", "provable", "proved", "quick_check_lines", "read_schema", "verdict_lines", "walk"]
