"""Helpers the writer's tests share: a settable clock, event ids and rows, and realistic text."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

MIB = 1 << 20
CODECS = ("deflate", "zstd")
T0 = 1_750_000_000.0


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def eid(i: int) -> str:
    return f"{i:012x}"


def net_row(i: int, **extra: object) -> dict[str, object]:
    return {"event_id": eid(i), "timestamp": "2025-06-15T15:06:40.000000Z", "domain": "api.example.com",
            "decision": "allowed", "trace_id": f"trace-{i // 10}", "turn_id": f"turn-{i // 100}", **extra}


def query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def text_bytes(rng: random.Random, n: int) -> bytes:
    words = ["alpha", "beta", "gamma", "delta", "tool_use", "content", "role", "assistant", "{", "}", '"',
             "message", "stream", "token", "0", "1", "42", "error", "ok", ":", ","]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words).encode() + b" "
    return bytes(out[:n])


def json_text(rng: random.Random, n: int) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < n:
        out += json.dumps({"id": i, "role": rng.choice(["user", "assistant", "tool"]),
                           "content": text_bytes(rng, rng.randint(20, 200)).decode(),
                           "tokens": rng.randint(1, 5000)}).encode() + b"\n"
        i += 1
    return bytes(out[:n])
