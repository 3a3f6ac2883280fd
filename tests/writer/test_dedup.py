"""Behaviour of the writer's body dedup: a payload shared by several rows, or committed in an
earlier block or by an earlier writer, is stored once; equal lengths with other bytes are not.
"""

from __future__ import annotations

import json
import random

from tests.writer.helpers import eid, net_row, query

from oracles import archive_reader as oracle
from capsem_core.writer import Body, LedgerWriter


# --- dedup (§3.2.4, §8.8) --------------------------------------------------------------------------

def security_rows(i: int) -> list[tuple[str, dict[str, object]]]:
    base = {"event_id": eid(i), "event_type": "http.request", "timestamp_unix_ms": 1_750_000_000_000 + i}
    return [
        ("security_rule_events", {**base, "rule_id": "r1", "rule_action": "block", "rule_json": "{}"}),
        ("security_decision_events", {**base, "stage": "rule", "actor": "policy", "previous_decision": "allow",
                                      "requested_decision": "block", "effective_decision": "block"}),
    ]


def test_a_rule_payload_and_its_decision_share_one_span_and_the_archive_grows_by_one_copy(tmp_path):
    payload = json.dumps({"event": "http.request", "url": "https://example.com/" + "x" * 3000}).encode()
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        for table, row in security_rows(1):
            w.insert(table, row, [Body("payload", payload, "security.rule")])
        assert (w.bodies_stored, w.bodies_deduplicated, w.bodies_deduplicated_in_block) == (1, 1, 1)
    spans = query(db, "SELECT DISTINCT block_offset, body_offset, body_len FROM event_body_blobs")
    assert len(spans) == 1
    assert sum(s.raw_len for s in oracle.walk_block((tmp_path / "session.bodies").read_bytes(), 16)) == len(payload)
    for table, _ in security_rows(1):
        assert oracle.read_body(db, eid(1), table, "payload") == payload


def test_three_matches_of_one_event_store_its_payload_once(tmp_path):
    payload = b'{"matched": "three rules"}'
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        for rule in ("a", "b", "c"):
            w.insert("security_rule_events", {**security_rows(2)[0][1], "rule_id": rule},
                     [Body("payload", payload, "security.rule")])
    assert query(db, "SELECT COUNT(*) FROM security_rule_events") == [(3,)]
    assert query(db, "SELECT COUNT(*), SUM(body_len) FROM event_body_blobs") == [(1, len(payload))]
    assert query(db, "SELECT raw_len FROM body_blocks") == [(len(payload),)]


def test_a_committed_body_of_512_bytes_or_more_is_reused_from_an_earlier_block(tmp_path):
    db = tmp_path / "session.db"
    big, small = b"B" * 512, b"s" * 511
    with LedgerWriter(tmp_path, close_every_flush=True) as w:
        w.insert("net_events", net_row(1), [Body("request", big, "http.request"),
                                            Body("response", small, "http.request")])
        w.flush()
        w.insert("net_events", net_row(2), [Body("request", big, "http.request"),
                                            Body("response", small, "http.request")])
        assert (w.bodies_deduplicated_in_archive, w.bodies_stored) == (1, 3)
    spans = dict(((e, d), (b, o)) for e, d, b, o in
                 query(db, "SELECT event_id, direction, block_offset, body_offset FROM event_body_blobs"))
    assert spans[(eid(1), "request")] == spans[(eid(2), "request")]
    assert spans[(eid(1), "response")][0] != spans[(eid(2), "response")][0]
    for i in (1, 2):
        assert oracle.read_body(db, eid(i), "net_events", "request") == big
        assert oracle.read_body(db, eid(i), "net_events", "response") == small


def test_a_reopened_writer_reuses_bodies_committed_by_the_previous_one(tmp_path):
    body = random.Random(4).randbytes(4096)
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", body, "http.request")])
    size = (tmp_path / "session.bodies").stat().st_size
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(2), [Body("request", body, "http.request")])
        assert w.bodies_deduplicated_in_archive == 1
    assert (tmp_path / "session.bodies").stat().st_size == size
    assert oracle.read_body(tmp_path / "session.db", eid(2), "net_events", "request") == body


def test_equal_length_different_bytes_are_two_bodies(tmp_path):
    db = tmp_path / "session.db"
    with LedgerWriter(tmp_path) as w:
        w.insert("net_events", net_row(1), [Body("request", b"a" * 600, "http.request")])
        w.flush()
        w.insert("net_events", net_row(2), [Body("request", b"b" * 600, "http.request"),
                                            Body("response", b"a" * 599 + b"b", "http.request")])
    assert len(query(db, "SELECT DISTINCT body_offset FROM event_body_blobs")) == 3
    assert oracle.read_body(db, eid(2), "net_events", "response") == b"a" * 599 + b"b"
