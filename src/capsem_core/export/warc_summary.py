"""What a WARC export wrote and what it left out: the skip reasons, the skipped bodies'
sample and the summary ``Ledger.export_warc`` returns.

A body the export cannot honestly describe is skipped, counted under one reason and the walk
goes on; nothing is guessed. The five reasons are Capsem's (their names are in exported
files, so they are stable); ``unrepresentable-header`` is capsem-core's, for any other header
value a record would carry that holds a CR or LF (or is not UTF-8, or is over 64 KiB): the
content type, or a part of the record id (a ledger's rows are untrusted). When several apply
the first in this order counts: the record id's header, the source row, the URI, the date,
the body's bytes, the content type (Capsem's order, its writer refusing a header last).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MISSING_SOURCE_ROW = "missing-source-row"
UNREADABLE_TIMESTAMP = "unreadable-timestamp"
UNREPRESENTABLE_URI = "unrepresentable-uri"
CORRUPT_BODY = "corrupt-body"
UNREADABLE_BODY = "unreadable-body"
UNREPRESENTABLE_HEADER = "unrepresentable-header"
SKIP_REASONS: tuple[str, ...] = (MISSING_SOURCE_ROW, UNREADABLE_TIMESTAMP, UNREPRESENTABLE_URI, CORRUPT_BODY,
                                 UNREADABLE_BODY, UNREPRESENTABLE_HEADER)

# Skipped bodies kept by name in a summary (Capsem keeps as many); every one is counted.
MAX_SKIPPED_SAMPLE = 32

# The verify kernel's fault kinds (the status table's) that mean the bytes came back and are
# not the body the index recorded; every other kind of a body's fault is an unreadable body.
CORRUPT_KINDS = frozenset(("body_hash", "bad_body_hash_text"))


@dataclass(frozen=True, slots=True)
class SkippedBody:
    """One body the export left out: its key as the index holds it (None for NULL; texts
    that were not UTF-8 surrogate-escaped: sanitize before showing), the reason (one of
    SKIP_REASONS), the header field at fault for unrepresentable-header ("content_type",
    "event_id", "direction" or "source_table"; else None) and what was wrong, in words."""

    event_id: str | None
    source_table: str | None
    direction: str | None
    reason: str
    field: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class WarcSummary:
    """What ``Ledger.export_warc`` did: ``records`` resource records written (one per body),
    ``bytes`` written (gzip members, both warcinfo records included), ``skipped`` bodies left
    out, ``skipped_by_reason`` (every reason of SKIP_REASONS, 0 included), ``sample`` (the
    first MAX_SKIPPED_SAMPLE skipped bodies, in archive order), the ``session`` name the
    records carry, the ``export_id`` (one uuid per export) and ``exported_at`` (the warcinfo
    date). The closing warcinfo carries the same counts."""

    records: int
    bytes: int
    skipped: int
    skipped_by_reason: dict[str, int]
    sample: tuple[SkippedBody, ...]
    session: str
    export_id: str
    exported_at: str

    @property
    def complete(self) -> bool:
        """True when every body of the ledger was written."""
        return self.skipped == 0


@dataclass
class Tally:
    """The running count of an export: records and bytes written, skips by reason, the sample."""

    records: int = 0
    bytes: int = 0
    by_reason: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))
    sample: list[SkippedBody] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return sum(self.by_reason.values())

    def skip(self, body: SkippedBody) -> None:
        self.by_reason[body.reason] += 1
        if len(self.sample) < MAX_SKIPPED_SAMPLE:
            self.sample.append(body)

    def closing_fields(self) -> list[tuple[str, str]]:
        """The closing warcinfo's counts, Capsem's way: records, skipped, then each reason
        that occurred, by name."""
        fields = [("capsem-records", str(self.records)), ("capsem-skipped", str(self.skipped))]
        fields += [(f"capsem-skipped-{reason}", str(n)) for reason, n in sorted(self.by_reason.items()) if n]
        return fields

    def summary(self, session: str, export_id: str, exported_at: str) -> WarcSummary:
        return WarcSummary(self.records, self.bytes, self.skipped, dict(self.by_reason), tuple(self.sample),
                           session, export_id, exported_at)


__all__ = ["CORRUPT_BODY", "CORRUPT_KINDS", "MAX_SKIPPED_SAMPLE", "MISSING_SOURCE_ROW", "SKIP_REASONS",
           "SkippedBody", "Tally", "UNREADABLE_BODY", "UNREADABLE_TIMESTAMP", "UNREPRESENTABLE_HEADER",
           "UNREPRESENTABLE_URI", "WarcSummary"]
