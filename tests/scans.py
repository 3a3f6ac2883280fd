"""The native SQL scans of the body index by path, as tests call them: each opens the file by
its read plan's URI (or scans on a given connection), outside any ``Snapshot``. The package
itself scans through ``capsem_core.bodies.scan`` on a snapshot."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from capsem_core import cores, db
from capsem_core._native import _index
from capsem_core._native._index import PARALLEL_MIN_ROWS, RANGES_PER_READER, parse_body_hash  # noqa: F401


def _args(path: os.PathLike[str] | str, plan: db.ReadPlan | None,
          conn: sqlite3.Connection | None) -> tuple[str, dict[str, Any]]:
    path = os.fsdecode(os.fspath(path))
    plan = plan or db.read_plan(path)
    return plan.uri, {"busy_ms": db.busy_timeout_ms(), "path": path, "conn": conn}


def scan_bodies(path: os.PathLike[str] | str, *, threads: int = 0, plan: db.ReadPlan | None = None,
                conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    uri, kw = _args(path, plan, conn)
    return _index.scan_bodies(uri, threads=cores.threads(threads), **kw)


def scan_blocks(path: os.PathLike[str] | str, *, plan: db.ReadPlan | None = None,
                conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    uri, kw = _args(path, plan, conn)
    return _index.scan_blocks(uri, **kw)


def scan_keys(path: os.PathLike[str] | str, *, plan: db.ReadPlan | None = None,
              conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    uri, kw = _args(path, plan, conn)
    return _index.scan_keys(uri, **kw)
