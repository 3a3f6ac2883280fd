"""Ledgers and readers for the WARC export tests: an upstream-shaped ledger (one event of each
body table, as Capsem writes them), a hostile one (every way a body is skipped), and the
file read back by warcio, by FastWARC and member by member."""

from __future__ import annotations

import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path

from capsem_core.writer import Body, LedgerWriter

STAMP = "2026-11-30T12:00:01.250000Z"
MS = 1_796_040_005_999  # 2026-11-30T12:00:05.999Z
RULE_JSON = '{"id": "r1"}'


@dataclass(frozen=True)
class Record:
    """One WARC record as a reader gave it: type, headers in order, payload."""

    type: str
    headers: list[tuple[str, str]]
    payload: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


def read_warcio(path: Path) -> list[Record]:
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        return [Record(r.rec_type, list(r.rec_headers.headers), r.content_stream().read())
                for r in ArchiveIterator(f, check_digests=False)]


def read_fastwarc(path: Path) -> list[Record]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with open(path, "rb") as f:
        return [Record(str(r.headers["WARC-Type"]), [(str(k), str(v)) for k, v in r.headers.items()],
                       r.reader.read())
                for r in ArchiveIterator(f, record_types=WarcRecordType.any_type, parse_http=False)]


def gzip_members(data: bytes) -> list[bytes]:
    """The file's gzip members, each inflated on its own."""
    members = []
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        members.append(d.decompress(data))
        assert d.eof, "the file ends inside a gzip member"
        data = d.unused_data
    return members


def warc_fields(payload: bytes) -> list[tuple[str, str]]:
    assert payload.endswith(b"\r\n")
    return [tuple(line.split(": ", 1)) for line in payload.decode().split("\r\n")[:-1]]  # type: ignore[misc]


def _net(event_id: str, **extra: object) -> dict[str, object]:
    return {"event_id": event_id, "timestamp": STAMP, "domain": "api.example.com", "decision": "allowed",
            "path": "/v1/x", "query": "q=1", **extra}


def _rule(event_id: str, ms: object = MS) -> dict[str, object]:
    return {"event_id": event_id, "timestamp_unix_ms": ms, "event_type": "http.request", "rule_id": "rule-7",
            "rule_action": "block", "rule_json": RULE_JSON}


def write_upstream_ledger(directory: Path) -> None:
    """One event of each of the eight body tables, with the values Capsem's tables hold."""
    with LedgerWriter(directory) as w:
        w.insert("net_events", _net("00000000000a"), bodies=[
            Body("request", b"GET body", "http.request", "application/json"),
            Body("response", b"a prefix of a larger body", "http.request", None, original_bytes=10_000)])
        w.insert("model_calls", {"event_id": "00000000000b", "timestamp": "2026-11-30T12:00:02Z",
                                 "provider": "api.anthropic.com", "method": "POST", "path": "/v1/messages"},
                 bodies=[Body("request", b'{"model": "m"}', "model.call", "application/json")])
        w.insert("tool_calls", {"event_id": "00000000000c", "timestamp": "2026-11-30T12:00:03.5Z", "call_index": 0,
                                "call_id": "toolu_01", "tool_name": "bash"},
                 bodies=[Body("request", b'{"cmd": "ls"}', "mcp.tool_call", "application/json")])
        w.insert("tool_responses", {"event_id": "00000000000d", "model_call_id": 1, "call_id": "toolu_01"},
                 bodies=[Body("response", b"file1\nfile2\n", "mcp.tool_call", "text/plain")])
        w.insert("exec_events", {"event_id": "00000000000e", "timestamp": STAMP, "exec_id": 42, "command": "ls"},
                 bodies=[Body("stdout", b"out\n", "process.exec", "text/plain"),
                         Body("stderr", b"err\n", "process.exec", "text/plain")])
        w.insert("security_rule_events", _rule("00000000000f"),
                 bodies=[Body("payload", b'{"rule": 1}', "security.rule", "application/json")])
        w.insert("security_decision_events", {"event_id": "00000000000f", "timestamp_unix_ms": MS + 1000,
                                              "event_type": "http.request", "stage": "rule", "actor": "policy",
                                              "previous_decision": "allow", "requested_decision": "block",
                                              "effective_decision": "block"},
                 bodies=[Body("payload", b'{"decision": 1}', "security.decision", "application/json")])
        w.insert("security_ask_events", {"event_id": "000000000010", "timestamp_unix_ms": 0, "ask_id": "0000000000a5",
                                         "event_type": "http.request", "rule_id": "rule-7", "rule_name": "ask",
                                         "status": "pending", "rule_json": RULE_JSON},
                 bodies=[Body("payload", b'{"ask": 1}', "security.ask", "application/json")])
    # The tool_responses body's archive time, which its record carries (no time column).
    with sqlite3.connect(directory / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET created_at = '2026-11-30T12:00:04.000001Z' "
                     "WHERE source_table = 'tool_responses'")
    conn.close()


def write_hostile_ledger(directory: Path) -> None:
    """Good bodies around one of each way a body is skipped (see test_warc's expectations)."""
    with LedgerWriter(directory) as w:
        w.insert("net_events", _net("0000000000a1"), bodies=[Body("request", b"good one", "http.request", "text/plain")])
        w.insert("net_events", _net("0000000000a2"),
                 bodies=[Body("request", b"forged", "http.request", "text/html\r\nWARC-Type: revisit")])
        w.insert("tool_calls", {"event_id": "0000000000a3", "timestamp": STAMP, "call_index": 0, "call_id": "c1",
                                "tool_name": "evil\nWARC-Type: revisit"},
                 bodies=[Body("request", b"tool args", "mcp.tool_call", "application/json")])
        w.insert("tool_responses", {"event_id": "0000000000a4", "model_call_id": 1, "call_id": "c\r\n2"},
                 bodies=[Body("response", b"tool result", "mcp.tool_call", "text/plain")])
        w.insert("exec_events", {"event_id": "0000000000a5", "timestamp": STAMP, "exec_id": 1, "command": "x"},
                 bodies=[Body("stdout", b"orphaned", "process.exec", "text/plain")])
        w.insert("net_events", _net("0000000000a6", timestamp="2026-11-30 12:00:00"),
                 bodies=[Body("request", b"space in time", "http.request", "text/plain")])
        w.insert("net_events", _net("0000000000a7", timestamp="2026-11-30T12:00:00+01:00"),
                 bodies=[Body("request", b"offset in time", "http.request", "text/plain")])
        w.insert("security_rule_events", _rule("0000000000a8", ms=10**18),
                 bodies=[Body("payload", b"absurd millis", "security.rule", "application/json")])
        w.insert("net_events", _net("0000000000a9"), bodies=[Body("request", b"hash will not match", "http.request",
                                                                   "text/plain")])
        w.insert("net_events", _net("0000000000aa"), bodies=[Body("response", b"good two", "http.request", None)])
    with sqlite3.connect(directory / "session.db") as conn:
        conn.execute("DELETE FROM exec_events WHERE event_id = '0000000000a5'")
        # A well-formed hash of other bytes: the body reads back and fails it.
        conn.execute("UPDATE event_body_blobs SET body_hash = ? WHERE event_id = '0000000000a9'",
                     ("blake3:" + "0" * 62 + "ff",))
    conn.close()


# What write_hostile_ledger's skipped bodies are skipped for, by key.
HOSTILE_SKIPS = {
    ("0000000000a2", "net_events", "request"): ("unrepresentable-header", "content_type"),
    ("0000000000a3", "tool_calls", "request"): ("unrepresentable-uri", None),
    ("0000000000a4", "tool_responses", "response"): ("unrepresentable-uri", None),
    ("0000000000a5", "exec_events", "stdout"): ("missing-source-row", None),
    ("0000000000a6", "net_events", "request"): ("unreadable-timestamp", None),
    ("0000000000a7", "net_events", "request"): ("unreadable-timestamp", None),
    ("0000000000a8", "security_rule_events", "payload"): ("unreadable-timestamp", None),
    ("0000000000a9", "net_events", "request"): ("corrupt-body", None),
}
HOSTILE_WRITTEN = {("0000000000a1", "net_events", "request"), ("0000000000aa", "net_events", "response")}
