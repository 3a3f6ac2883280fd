"""ready() on a 1,000,000-row ledger against a 1,000-row one (same run).

Readiness checks the schema's shape only, once per PRAGMA schema_version, so its cost must
not grow with the ledger. The group's baseline is the 1,000-row ledger; the 1,000,000-row
ratio must stay >= 1/1.5 (ready on the big ledger at most 1.5x slower). The page-scanning
readiness Capsem used before (PRAGMA integrity_check) is measured beside it for scale.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from capsem_core import schema
from capsem_core.db import connect_readonly


def _ledger_with_rows(directory: Path, rows: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "session.db"
    conn = sqlite3.connect(db)
    schema.create_schema(conn)
    with conn:
        conn.execute("INSERT INTO body_blocks VALUES (16, 1048576, 200000, '2026-11-30T12:00:00.000000Z')")
        conn.executemany(
            "INSERT INTO event_body_blobs (event_id, event_type, source_table, direction, original_bytes, "
            "stored_bytes, truncated, body_hash, block_offset, body_offset, body_len, created_at) "
            "VALUES (printf('%012x', ?1), 'dns.query', 'net_events', 'request', 200, 200, 0, "
            "'blake3:' || printf('%064x', ?1), 16, 0, 200, '2026-11-30T12:00:00.000000Z')",
            ((i,) for i in range(rows)))
    conn.close()
    return db


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("ready")
    return {n: _ledger_with_rows(root / str(n), n) for n in (1_000, 1_000_000)}


@pytest.mark.benchmark(group="ready")
@pytest.mark.parametrize("rows", [1_000, 1_000_000])
def test_ready(benchmark, ledgers: dict[int, Path], rows: int) -> None:
    conn = connect_readonly(ledgers[rows])
    check = schema.ReadyCheck(conn, ledgers[rows])
    check.ready()
    benchmark.extra_info["baseline"] = rows == 1_000
    benchmark(check.ready)
    assert check.full_checks == 1
    conn.close()


@pytest.mark.benchmark(group="ready-vs-page-scan")
def test_ready_on_a_million_rows(benchmark, ledgers: dict[int, Path]) -> None:
    conn = connect_readonly(ledgers[1_000_000])
    check = schema.ReadyCheck(conn, ledgers[1_000_000])
    benchmark(check.ready)
    conn.close()


@pytest.mark.benchmark(group="ready-vs-page-scan")
def test_integrity_check_on_a_million_rows(benchmark, ledgers: dict[int, Path]) -> None:
    conn = connect_readonly(ledgers[1_000_000])
    benchmark.extra_info["baseline"] = True
    benchmark.pedantic(lambda: conn.execute("PRAGMA integrity_check").fetchall(), rounds=1, iterations=1)
    conn.close()
