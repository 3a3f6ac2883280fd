"""The rollup's sums where a hostile or damaged ledger makes them ones main.db cannot hold as
Capsem computes them (a token sum past 64 bits or not whole, a cost that is not finite), and
a main.db whose session id is not unique: each refused in one line, nothing written, and
``check``'s route identity says it could not compare rather than failing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from capsem_core import sessions as S
from capsem_core.errors import LedgerError
from tests.sessions.test_sessions import home, register, write_ledger  # noqa: F401 (home: a fixture)

UNFIT = [("input_tokens", 1e30, "INTEGER total cannot hold"), ("output_tokens", 2.75, "INTEGER total cannot hold"),
         ("estimated_cost_usd", float("inf"), "not a cost main.db can hold")]


def _ledger_with(home: S.Home, column: str, value: float) -> Path:
    register(home, "s1", "2026-01-01T00:00:00Z", status="stopped", stopped_at="2026-01-01T01:00:00Z")
    db = write_ledger(home.sessions_root / "s1", net=["allowed"], models=[("anthropic", "m", 1, 1, 0.5)])
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"UPDATE model_calls SET {column} = ?", (value,))
    conn.close()
    return db


def _totals(main_db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(main_db)
    try:
        return conn.execute("SELECT * FROM sessions").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("column, value, words", UNFIT)
def test_a_sum_main_db_cannot_hold_is_refused_naming_the_ledger_never_written_as_zero(
        home: S.Home, column: str, value: float, words: str) -> None:
    db = _ledger_with(home, column, value)
    before = _totals(home.main_db)
    with pytest.raises(LedgerError, match=words) as err:
        S.rollup(home.main_db, "s1", db)
    assert err.value.path == db and column in str(err.value)
    assert _totals(home.main_db) == before


def test_the_rollup_command_says_it_in_one_line_in_text_and_in_json(home: S.Home) -> None:
    _ledger_with(home, "input_tokens", 1e30)
    env = {**os.environ, "CAPSEM_HOME": str(home.home)}
    text = subprocess.run([sys.executable, "-m", "capsem_core", "rollup", "s1"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert text.returncode == 1 and text.stderr.count("\n") == 1 and "Traceback" not in text.stderr
    assert "cannot hold" in text.stderr
    as_json = subprocess.run([sys.executable, "-m", "capsem_core", "rollup", "s1", "--json"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert as_json.returncode == 1 and "Traceback" not in as_json.stderr
    assert "cannot hold" in json.loads(as_json.stdout)["error"]


def test_check_of_such_a_session_says_its_totals_were_not_compared(home: S.Home) -> None:
    _ledger_with(home, "estimated_cost_usd", float("inf"))
    env = {**os.environ, "CAPSEM_HOME": str(home.home)}
    done = subprocess.run([sys.executable, "-m", "capsem_core", "check", "s1", "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    notes = [f for f in report["checks"]["identity_graph"]["findings"] if f["code"] == "route_not_compared"]
    assert notes and "cannot be rolled up" in notes[0]["message"]


def test_a_session_id_main_db_holds_twice_is_named_as_such_and_nothing_is_written(home: S.Home) -> None:
    db = _ledger_with(home, "input_tokens", 3)
    conn = sqlite3.connect(home.main_db)
    with conn:
        conn.execute("CREATE TABLE copy AS SELECT * FROM sessions")
        conn.execute("DROP TABLE sessions")
        conn.execute("ALTER TABLE copy RENAME TO sessions")
        conn.execute("INSERT INTO sessions SELECT * FROM sessions")
    conn.close()
    before = _totals(home.main_db)
    with pytest.raises(LedgerError, match="has 2 rows in main.db") as err:
        S.rollup(home.main_db, "s1", db)
    assert err.value.path == home.main_db and _totals(home.main_db) == before
