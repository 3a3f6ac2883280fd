"""Ledgers for the bodies tests: a multi-block one written here (several tables and
directions, incompressible bodies so blocks fill), and a small realistic sample."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from capsem_core.sample import write_sample_ledger
from capsem_core.writer import Body, LedgerWriter

TABLES = (("net_events", "request"), ("net_events", "response"), ("model_calls", "request"))


def event_id(i: int) -> str:
    return f"{i:012x}"


def write_blocks_ledger(directory: Path, count: int = 24, size: int = 180_000, seed: int = 7) -> dict[tuple[str, str, str], bytes]:
    """``count`` events, each with a request and a response body of about ``size`` random
    bytes (so the archive holds several 1 MiB blocks), half of them net_events, half
    model_calls. Returns {key: bytes}."""
    rng = random.Random(seed)
    written: dict[tuple[str, str, str], bytes] = {}
    with LedgerWriter(directory) as writer:
        for i in range(count):
            table = "net_events" if i % 2 == 0 else "model_calls"
            row = ({"event_id": event_id(i), "timestamp": "2026-11-30T12:00:00.000000Z",
                    "domain": "api.anthropic.com", "decision": "allowed"} if table == "net_events" else
                   {"event_id": event_id(i), "timestamp": "2026-11-30T12:00:00.000000Z", "provider": "anthropic",
                    "method": "POST", "path": "/v1/messages"})
            bodies = []
            for direction in ("request", "response"):
                data = rng.randbytes(rng.randrange(size // 2, size)) + f"{i} {direction}".encode()
                written[(event_id(i), table, direction)] = data
                bodies.append(Body(direction, data, "http.request" if table == "net_events" else "model.call",
                                   "application/octet-stream"))
            writer.insert(table, row, bodies=bodies)
            if i % 5 == 4:
                writer.flush()
    return written


@pytest.fixture
def blocks_ledger(tmp_path: Path) -> tuple[Path, dict[tuple[str, str, str], bytes]]:
    written = write_blocks_ledger(tmp_path / "blocks")
    return tmp_path / "blocks", written


_SAMPLE: dict[str, Path] = {}


@pytest.fixture
def sample_ledger(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy (each test may damage its own) of a 3,000-body realistic sample written once."""
    if "small" not in _SAMPLE:
        base = tmp_path_factory.mktemp("sample") / "ledger"
        write_sample_ledger(base, seed=3, mix="small", bodies=3000)
        _SAMPLE["small"] = base
    dest = tmp_path / "sample"
    shutil.copytree(_SAMPLE["small"], dest)
    return dest
