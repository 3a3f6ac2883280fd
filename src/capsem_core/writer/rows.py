"""The rows a ledger writer buffers: ``Body``, timestamps, table specs, batches, multi-row INSERTs.

A ledger row is buffered in a ``Batch`` (rows of one table sharing one column list) until a
flush inserts it; a body becomes an ``event_body_blobs`` row (``BodyRow``) naming its span in
the archive. ``Tables`` validates what ``LedgerWriter.insert`` is given against the schema,
so every CHECK of ``event_body_blobs`` holds by construction.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["Body", "ledger_timestamp"]

BODY_DIRECTIONS = frozenset(("request", "response", "payload", "stdout", "stderr"))
_HEX12 = re.compile(r"[0-9a-f]{12}")
_MAX_ORIGINAL_BYTES = (1 << 63) - 1  # SQLite's INTEGER

# Tables the ledger writer fills itself (the body index) or never writes (the version marker).
WRITER_OWNED_TABLES = frozenset(("body_blocks", "event_body_blobs", "transport_schema"))

BODY_INSERT_HEAD = (
    "INSERT OR REPLACE INTO event_body_blobs (event_id, event_type, source_table, direction, content_type, "
    "original_bytes, stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, trace_id, "
    "turn_id, created_at) VALUES ")
BODY_COLUMNS = 15
# Rows per INSERT statement. SQLite rebuilds a CHECK's IN-list once per statement run, so one
# statement carrying many rows checks them for a fraction of the per-row cost.
ROWS_PER_STATEMENT = 64

# A staged event_body_blobs row, in BODY_INSERT_HEAD's column order.
BodyRow = tuple[str, str, str, str, "str | None", int, int, int, str, int, int, int, object, object, str]
Row = tuple[object, ...]
# Positions in a BodyRow that the writer reads back.
ROW_HASH: Final = 8
ROW_BLOCK: Final = 9
ROW_OFFSET: Final = 10
ROW_LEN: Final = 11


@dataclass(slots=True)
class Body:
    """One captured body of a ledger row: what ``LedgerWriter.insert`` archives."""

    direction: str
    data: bytes
    event_type: str
    content_type: str | None = None
    original_bytes: int | None = None


def _second_prefix(seconds: int) -> str:
    t = time.gmtime(seconds)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}."


def ledger_timestamp(epoch_seconds: float) -> str:
    """RFC 3339 UTC to the microsecond, fixed width: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    seconds, micros = divmod(round(epoch_seconds * 1_000_000), 1_000_000)
    return f"{_second_prefix(seconds)}{micros:06d}Z"


class Stamper:
    """``ledger_timestamp`` for a clock read many times a second."""

    __slots__ = ("_second", "_prefix")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, now: float) -> str:
        micros = round(now * 1_000_000)
        second, fraction = divmod(micros, 1_000_000)
        if second != self._second:
            # Most stamps of a busy second share their prefix: format it once.
            self._prefix = _second_prefix(second)
            self._second = second
        return f"{self._prefix}{fraction:06d}Z"


class Batch:
    """Buffered rows of one table sharing one column list, inserted together at the flush."""

    __slots__ = ("table", "keys", "head", "rows")

    def __init__(self, table: str, keys: tuple[str, ...], head: str) -> None:
        self.table = table
        self.keys = keys
        self.head = head  # "INSERT INTO table (columns) VALUES "
        self.rows: list[Row] = []


def values_sql(head: str, width: int, rows: int) -> str:
    group = "(" + ", ".join("?" * width) + ")"
    return head + ", ".join([group] * rows)


def insert_rows(conn: sqlite3.Connection, head: str, width: int, rows: list[Row] | list[BodyRow],
                per_statement: int) -> None:
    """Insert ``rows`` with multi-row VALUES statements of ``per_statement`` rows (and one remainder)."""
    if not rows:
        return
    k = max(1, min(per_statement, len(rows)))
    full = len(rows) - len(rows) % k
    chain = itertools.chain.from_iterable
    if full:
        conn.executemany(values_sql(head, width, k), (tuple(chain(rows[i:i + k])) for i in range(0, full, k)))
    if full < len(rows):
        rest = rows[full:]
        conn.execute(values_sql(head, width, len(rest)), tuple(chain(rest)))


class TableSpec:
    """What the writer knows of one table: its columns, its INSERT heads, its open batch."""

    __slots__ = ("name", "columns", "has_event_id", "carries_bodies", "statements", "batch")

    def __init__(self, name: str, columns: Iterable[str], carries_bodies: bool) -> None:
        self.name = name
        self.columns = frozenset(columns)
        self.has_event_id = "event_id" in self.columns
        self.carries_bodies = carries_bodies
        self.statements: dict[tuple[str, ...], str] = {}
        self.batch: Batch | None = None


class Tables:
    """The tables a writer fills, from the schema, and the checks ``insert`` runs against them."""

    __slots__ = ("_table_columns", "_tables", "body_tables", "_body_event_types", "specs")

    def __init__(self, table_columns: Callable[[str], Iterable[str]], tables: Iterable[str],
                 body_tables: Iterable[str], body_event_types: Iterable[str]) -> None:
        self._table_columns = table_columns
        self._tables = frozenset(tables) - WRITER_OWNED_TABLES
        self.body_tables = frozenset(body_tables)
        self._body_event_types = frozenset(body_event_types)
        self.specs: dict[str, TableSpec] = {}

    def spec(self, table: str) -> TableSpec:
        spec = self.specs.get(table)
        if spec is None:
            if table not in self._tables:
                raise ValueError(f"{table!r} is not a session.db table this writer fills "
                                 "(body_blocks and event_body_blobs are written from bodies)")
            spec = self.specs[table] = TableSpec(table, self._table_columns(table), table in self.body_tables)
        return spec

    def forget_batches(self) -> None:
        """The batches were taken by a flush: the next row of each table opens a new one."""
        for spec in self.specs.values():
            spec.batch = None

    @staticmethod
    def batch_for(spec: TableSpec, keys: tuple[str, ...], batches: list[Batch]) -> Batch:
        """A new batch of ``spec`` for rows with columns ``keys``, appended to ``batches``."""
        head = spec.statements.get(keys)
        if head is None:
            if not keys:
                raise ValueError(f"a {spec.name} row needs at least one column")
            unknown = [k for k in keys if k not in spec.columns]
            if unknown:
                raise ValueError(f"{spec.name} has no column {', '.join(map(repr, unknown))}")
            head = spec.statements[keys] = f"INSERT INTO {spec.name} ({', '.join(keys)}) VALUES "
        batch = Batch(spec.name, keys, head)
        batches.append(batch)
        spec.batch = batch
        return batch

    def check_bodies(self, spec: TableSpec, row: Mapping[str, object], bodies: tuple[Body, ...]) -> None:
        if not spec.carries_bodies:
            raise ValueError(f"{spec.name} rows carry no archived bodies (event_body_blobs.source_table allows "
                             f"{', '.join(sorted(self.body_tables))})")
        event_id = row.get("event_id")
        if not isinstance(event_id, str) or _HEX12.fullmatch(event_id) is None:
            raise ValueError(f"a body's event_id must be 12 lowercase hex characters, not {event_id!r}")
        directions: set[str] = set()
        for body in bodies:
            if not isinstance(body.data, (bytes, bytearray, memoryview)):
                raise ValueError(f"a body's data must be bytes, not {type(body.data).__name__}")
            if isinstance(body.data, memoryview) and (body.data.itemsize != 1 or body.data.ndim != 1
                                                      or not body.data.c_contiguous):
                # Measured and cut by len(), hashed by its bytes: only a flat view of bytes is both.
                raise ValueError("a body's memoryview must be one-dimensional bytes (memoryview(x).cast('B')), "
                                 f"not format {body.data.format!r} with {body.data.ndim} dimension(s)")
            if body.direction not in BODY_DIRECTIONS:
                raise ValueError(f"body direction {body.direction!r} is not one of {sorted(BODY_DIRECTIONS)}")
            if body.direction in directions:
                raise ValueError(f"two bodies of one row share direction {body.direction!r}: a body is keyed "
                                 "(event_id, table, direction), so the second would replace the first")
            directions.add(body.direction)
            if body.event_type not in self._body_event_types:
                raise ValueError(f"body event_type {body.event_type!r} is not an event_body_blobs event type")
            # Bound as Capsem binds them (TEXT, a 64-bit INTEGER): event_body_blobs is not STRICT
            # and its CHECKs are off for the writer's rows, so SQLite would store a BLOB, a REAL.
            declared = body.original_bytes
            if declared is not None and (not isinstance(declared, int) or isinstance(declared, bool)
                                         or not 0 <= declared <= _MAX_ORIGINAL_BYTES):
                raise ValueError(f"a body's original_bytes must be None or a whole number of bytes from 0 to "
                                 f"2**63-1, not {declared!r:.40}")
            if body.content_type is not None and not isinstance(body.content_type, str):
                raise ValueError(f"a body's content_type must be a str or None, not {type(body.content_type).__name__}")
