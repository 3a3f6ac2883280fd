"""``capsem-ledger list`` over 100,000 sessions, side by side with the old script's approach.

One CAPSEM_HOME is built per run: 100,000 sessions in main.db (a realistic mix of model,
network, tool and cost totals, 5% named persistent VMs) and a ledger pair on disk for 10% of
them, spread over the whole history. Each group compares this module's ``list`` with a
baseline doing the same job the way ``list_sessions.py`` does it: a plain SELECT of the
sessions, then ``os.path.exists`` per row in Python (without a LIMIT when ``--with-db`` must
be applied before the limit, which is what ``list`` promises now).

Run: ``python3 -m pytest bench/bench_list.py -q`` (each group's ratio of ours to the baseline
is printed after pytest-benchmark's table).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from capsem_core import sessions as S
from capsem_core.sessions import vmnames
from capsem_core.cli import list as list_command
from capsem_core.cli.sessions import list_lines
from capsem_core.format import pack_file_header

SESSIONS = 100_000
LEDGER_SHARE = 0.10
NAMED_SHARE = 0.05


@pytest.fixture(scope="module")
def big_home(tmp_path_factory: pytest.TempPathFactory) -> S.Home:
    root = tmp_path_factory.mktemp("capsem")
    layout = S.home_layout(root)
    S.create_main_db(layout.main_db)
    rng = random.Random(20260327)
    rows = []
    links: dict[str, str] = {}
    on_disk: list[Path] = []
    for i in range(SESSIONS):
        sid = f"2025{i // 3000 % 12 + 1:02d}{i % 28 + 1:02d}-{i:06d}-{rng.getrandbits(16):04x}"
        name = f"vm-{i}" if rng.random() < NAMED_SHARE else None
        start = 1_735_689_600 + i * 300  # one session every five minutes
        created = _rfc3339(start)
        status = rng.choice(["stopped"] * 8 + ["crashed", "running"])
        stopped = None if status == "running" else _rfc3339(start + rng.randint(5, 20_000))
        model = rng.random() < 0.4
        tin, tout = (rng.randint(100, 200_000), rng.randint(10, 20_000)) if model else (0, 0)
        reqs = rng.randint(1, 500) if rng.random() < 0.7 else 0
        denied = rng.randint(0, reqs // 10) if reqs else 0
        if name:
            links[name] = sid
        rows.append((sid, 1 if name else 0, "cli", status, created, stopped, reqs, reqs - denied, denied, tin, tout,
                     round(tin * 3e-6 + tout * 15e-6, 6), rng.randint(0, 80) if model else 0,
                     rng.randint(0, 400)))
        if rng.random() < LEDGER_SHARE:
            on_disk.append((layout.persistent_root / name) if name else (layout.sessions_root / sid))
    conn = sqlite3.connect(layout.main_db)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (id, persistent, mode, status, created_at, stopped_at, total_requests, "
            "allowed_requests, denied_requests, total_input_tokens, total_output_tokens, "
            "total_estimated_cost, total_tool_calls, total_file_events) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.close()
    # The name links a capsem-core home keeps beside main.db, written in one go (the
    # format of vmnames; link_name would rewrite the file once per VM).
    vmnames.sidecar_path(layout.main_db).write_text(json.dumps(
        {"format": vmnames.SIDECAR_FORMAT, "version": vmnames.SIDECAR_VERSION, "names": links}))
    header = pack_file_header()
    for directory in on_disk:
        directory.mkdir(parents=True)
        (directory / S.SESSION_DB).write_bytes(b"")
        (directory / S.SESSION_BODIES).write_bytes(header)
    # Directories of sessions main.db no longer lists, as a long-lived run dir has.
    for i in range(2_000):
        (layout.sessions_root / f"gone-{i}").mkdir()
    return layout


def _rfc3339(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    list_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def ours(layout: S.Home, *argv: str) -> Callable[[], str]:
    args = _args(*argv)

    def go() -> str:
        out = io.StringIO()
        items = S.list_sessions(S.ListFilter(limit=args.n, with_model=args.with_model, with_db=args.with_db,
                                             with_net=args.with_net, with_tools=args.with_tools,
                                             min_cost=args.min_cost, status=args.status), home=layout)
        out.write("\n".join(list_lines(items)) + "\n")
        return out.getvalue()
    return go


def baseline(layout: S.Home, *argv: str) -> Callable[[], str]:
    """list_sessions.py's approach: SELECT, then a Python existence check per row. With
    --with-db the LIMIT cannot be in SQL (the filter must come first), so every matching row
    is fetched."""
    args = _args(*argv)

    def go() -> str:
        conn = sqlite3.connect(f"file:{layout.main_db}?mode=ro", uri=True)
        conds = []
        if args.with_model:
            conds.append("(total_input_tokens + total_output_tokens) > 0")
        if args.min_cost > 0:
            conds.append(f"total_estimated_cost >= {args.min_cost}")
        if args.status:
            conds.append(f"status = '{args.status}'")
        sql = ("SELECT id, mode, status, created_at, stopped_at, storage_mode, total_requests, "
               "allowed_requests, denied_requests, total_input_tokens, total_output_tokens, "
               "total_estimated_cost, total_tool_calls, total_file_events "
               "FROM sessions" + (" WHERE " + " AND ".join(conds) if conds else "")
               + " ORDER BY created_at DESC, id DESC")
        if not args.with_db:
            sql += f" LIMIT {args.n}"
        raw = conn.execute(sql).fetchall()
        conn.close()
        by_id = vmnames.names_by_id(vmnames.read_links(layout.main_db))
        items = []
        for r in raw:
            name = by_id.get(r[0])
            d = (layout.persistent_root / name) if name else (layout.sessions_root / r[0])
            has = os.path.exists(d / S.SESSION_DB) and os.path.exists(d / S.SESSION_BODIES)
            if args.with_db and not has:
                continue
            items.append(S.ListedSession(S.SessionRow.from_tuple(r), name, d, has))
            if len(items) >= args.n:
                break
        return "\n".join(list_lines(items)) + "\n"
    return go


SCENARIOS = {
    "default -n 10": ("-n", "10"),
    "-n 10 --with-db --with-model": ("-n", "10", "--with-db", "--with-model"),
    "-n 1000 --with-db": ("-n", "1000", "--with-db"),
    "-n 10 --with-db --min-cost 3.3 (rare)": ("-n", "10", "--with-db", "--min-cost", "3.3"),
    "-n 100 --with-db --status crashed": ("-n", "100", "--with-db", "--status", "crashed"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_ours_and_the_baseline_print_the_same_list(big_home: S.Home, scenario: str) -> None:
    argv = SCENARIOS[scenario]
    assert ours(big_home, *argv)() == baseline(big_home, *argv)()


@pytest.mark.parametrize("impl", ["ours", "baseline"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_list_100k(benchmark, big_home: S.Home, scenario: str, impl: str) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"list 100k: {scenario}"
    benchmark.extra_info["baseline"] = impl == "baseline"
    fn = (ours if impl == "ours" else baseline)(big_home, *SCENARIOS[scenario])
    text = benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
    assert text.startswith("ID")
