"""What a WARC record may say: dates in whole UTC seconds from exactly the ledger's shape or
from bounded milliseconds, and header values that are UTF-8, short and free of CR and LF."""

from __future__ import annotations

import pytest

from capsem_core.export.warc_fields import (
    MAX_HEADER_VALUE_BYTES,
    MAX_UNIX_MS,
    header_value,
    id_part,
    resource_head,
    warc_date_of_ms,
    warc_date_of_text,
    warc_fields,
)


@pytest.mark.parametrize("stamp, date", [
    (b"2026-11-30T12:00:01Z", b"2026-11-30T12:00:01Z"),
    (b"2026-11-30T12:00:01.9Z", b"2026-11-30T12:00:01Z"),
    (b"2026-11-30T12:00:01.999999999Z", b"2026-11-30T12:00:01Z"),
    (b"2024-02-29T23:59:59.000001Z", b"2024-02-29T23:59:59Z"),
])
def test_a_ledger_timestamp_is_truncated_to_its_second(stamp: bytes, date: bytes) -> None:
    assert warc_date_of_text(stamp) == date


@pytest.mark.parametrize("stamp", [
    b"2026-11-30 12:00:01Z", b"2026-11-30T12:00:01+00:00", b"2026-11-30T12:00:01", b"2026-11-30T12:00:01.Z",
    b"2026-11-30T12:00:01z", b"2026-11-30T12:00:01Z\n", b" 2026-11-30T12:00:01Z", b"2026-02-30T00:00:00Z",
    b"2023-02-29T00:00:00Z", b"2026-11-30T24:00:00Z", b"2026-11-30T12:60:00Z", b"0000-01-01T00:00:00Z",
    "２０２６-11-30T12:00:01Z".encode(), b"", b"2026-11-30T12:00:01.1.2Z", b"1764504001",
])
def test_any_other_text_is_no_date_never_reinterpreted(stamp: bytes) -> None:
    assert warc_date_of_text(stamp) is None


@pytest.mark.parametrize("millis, date", [
    (0, b"1970-01-01T00:00:00Z"), (999, b"1970-01-01T00:00:00Z"), (1_796_040_005_999, b"2026-11-30T12:00:05Z"),
    (MAX_UNIX_MS, b"9999-12-31T23:59:59Z"),
])
def test_milliseconds_are_formatted_to_their_second(millis: int, date: bytes) -> None:
    assert warc_date_of_ms(millis) == date


@pytest.mark.parametrize("millis", [-1, MAX_UNIX_MS + 1, 10**30, -(10**30), 1.5, "1000", b"1000", None, True])
def test_absurd_or_foreign_milliseconds_are_no_date(millis: object) -> None:
    assert warc_date_of_ms(millis) is None


@pytest.mark.parametrize("raw", [b"a\rb", b"a\nb", b"\r\n", b"\xff\xfe", b"x" * (MAX_HEADER_VALUE_BYTES + 1),
                                 b"nul\x00", b"tab\t", b"\x1b]0;title\x07", b"del\x7f", "nel\x85".encode(),
                                 "c1\x9b31m".encode(), "ls\u2028".encode(), "ps\u2029".encode()])
def test_a_header_value_with_a_control_or_a_line_break_or_not_utf8_or_too_long_is_refused(raw: bytes) -> None:
    assert header_value(raw) is None


@pytest.mark.parametrize("raw", [b"evil:x", b"a> <urn:forged", b"x request", b"\x1bx"])
def test_a_record_id_part_holding_its_separators_or_a_space_is_refused(raw: bytes) -> None:
    assert id_part(raw) is None
    assert id_part(b"0000000000aa") == b"0000000000aa" and id_part("caf\u00e9".encode()) == "caf\u00e9".encode()


@pytest.mark.parametrize("raw", [b"text/html; charset=utf-8", "caf\u00e9/\u202e".encode(), b"",
                                 b"x" * MAX_HEADER_VALUE_BYTES])
def test_any_other_value_is_carried_as_it_is(raw: bytes) -> None:
    assert header_value(raw) == raw


def test_a_resource_header_block_has_capsems_fields_in_order() -> None:
    head = resource_head(b"urn:capsem:s:net_events:0000000000aa:request", b"https://h/p", b"2026-11-30T12:00:01Z",
                         b"ab" * 32, True, None, 12)
    assert head == (b"WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: <urn:capsem:s:net_events:0000000000aa:request>"
                    b"\r\nWARC-Target-URI: https://h/p\r\nWARC-Date: 2026-11-30T12:00:01Z\r\n"
                    b"WARC-Block-Digest: blake3:" + b"ab" * 32 + b"\r\nWARC-Truncated: length\r\n"
                    b"Content-Type: application/octet-stream\r\nContent-Length: 12\r\n\r\n")


def test_warcinfo_fields_are_crlf_lines_and_refuse_a_line_break() -> None:
    assert warc_fields([("software", "x/1"), ("capsem-records", "3")]) == b"software: x/1\r\ncapsem-records: 3\r\n"
    with pytest.raises(ValueError):
        warc_fields([("capsem-session", "a\nb")])
