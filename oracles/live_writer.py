"""A writer process for the events tests and benchmark: rows into six event tables, committed
tick after tick through ``capsem_core.writer.LedgerWriter`` while a reader follows.

Each row's time is the wall clock when it was inserted (``timestamp`` text or
``timestamp_unix_ms``), so a follower in another process can measure its lag as the time it
received the row minus the row's time. Some rows carry bodies (net_events requests, exec
stdout, security decision payloads), so their events name archived bodies.

    python -m oracles.live_writer DIR --rows N [--rate ROWS_PER_S] [--tick S] [--seed K]

With ``--rate`` the writer paces itself to that many rows a second, one flush (one commit)
per tick; without it, it writes as fast as it can, flushing after a random 1..60 rows, so
commits land at every possible place between a follower's pages. It prints one line
``ready`` once the ledger exists, and ``done <rows> <seconds>`` at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

from capsem_core.writer import Body, LedgerWriter, ledger_timestamp

Row = tuple[str, dict[str, object], list[Body]]


def _net(rng: random.Random, now: float, i: int) -> Row:
    eid = secrets.token_hex(6)
    bodies = [Body("request", f"GET /v1/{i} {rng.random()}".encode() * 3, "http.request")] if i % 3 == 0 else []
    return "net_events", {"event_id": eid, "timestamp": ledger_timestamp(now), "domain": "api.example.com",
                          "decision": "allowed", "method": "GET", "path": f"/v1/{i}"}, bodies


def _fs(rng: random.Random, now: float, i: int) -> Row:
    return "fs_events", {"timestamp": ledger_timestamp(now), "action": "write", "path": f"/workspace/f{i}.txt",
                         "size": rng.randint(0, 1 << 16)}, []


def _dns(rng: random.Random, now: float, i: int) -> Row:
    return "dns_events", {"timestamp": ledger_timestamp(now), "qname": f"h{i % 97}.example.com", "qtype": 1,
                          "qclass": 1, "rcode": 0, "decision": "allowed"}, []


def _exec(rng: random.Random, now: float, i: int) -> Row:
    eid = secrets.token_hex(6)
    bodies = [Body("stdout", f"line {i}\n".encode() * rng.randint(1, 20), "process.exec")] if i % 2 == 0 else []
    return "exec_events", {"event_id": eid, "timestamp": ledger_timestamp(now), "exec_id": i,
                           "command": f"make step-{i}", "exit_code": 0}, bodies


def _decision(rng: random.Random, now: float, i: int) -> Row:
    eid = secrets.token_hex(6)
    bodies = [Body("payload", json.dumps({"i": i}).encode(), "security.decision")] if i % 4 == 0 else []
    return "security_decision_events", {"timestamp_unix_ms": int(now * 1000), "event_id": eid,
                                        "event_type": "http.request", "stage": "rule", "actor": "policy",
                                        "previous_decision": "allow", "requested_decision": "allow",
                                        "effective_decision": "allow"}, bodies


def _transport(rng: random.Random, now: float, i: int) -> Row:
    return "transport_events", {"event_id": secrets.token_hex(6), "timestamp_unix_ms": int(now * 1000),
                                "event_type": "network.connect", "network_id": "net-1",
                                "event_json": json.dumps({"i": i})}, []


MAKERS: tuple[Callable[[random.Random, float, int], Row], ...] = (_net, _fs, _dns, _exec, _decision, _transport)
TABLES: tuple[str, ...] = ("net_events", "fs_events", "dns_events", "exec_events", "security_decision_events",
                           "transport_events")


def write(directory: Path, rows: int, rate: float | None, tick: float, seed: int) -> tuple[int, float]:
    """Write ``rows`` rows (see the module docstring); returns (rows, seconds taken)."""
    rng = random.Random(seed)
    with LedgerWriter(directory, flush_rows=1 << 30) as writer:
        writer.flush()
        print("ready", flush=True)
        began = time.time()
        written = 0
        while written < rows:
            if rate is None:
                batch = min(rows - written, rng.randint(1, 60))
            else:
                due = int((time.time() - began + tick) * rate)  # rows due by the end of this tick
                batch = min(rows - written, max(0, due - written))
            for _ in range(batch):
                now = time.time()
                table, row, bodies = rng.choice(MAKERS)(rng, now, written)
                writer.insert(table, row, bodies=bodies)
                written += 1
            writer.flush()
            if rate is not None:
                # Sleep to the next tick boundary; a late tick simply writes more next time.
                time.sleep(max(0.0, tick - (time.time() - began) % tick))
        return written, time.time() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="live_writer")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--rate", type=float)
    parser.add_argument("--tick", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    written, seconds = write(args.directory, args.rows, args.rate, args.tick, args.seed)
    print(f"done {written} {seconds:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
