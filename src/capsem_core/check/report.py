"""The check report as data: findings, sections, the whole report, and its JSON form.

A ``CheckReport`` is a tree of dataclasses with no I/O: ``check_ledger`` (``run.py``) fills
it, ``capsem_core.cli.check_text`` turns it into the doctor's text and ``report_to_json`` into
one stable JSON object (``JSON_FORMAT`` / ``JSON_VERSION``). The status and severity rules live here: what a
finding does to its section, and what the sections make of the report and its exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capsem_core.check.incremental import Coverage

JSON_FORMAT = "capsem-ledger-check"
JSON_VERSION = 1
# A damaged ledger can hold a million bad rows; the report keeps this many findings per check
# and counts the rest (``findings_total``), so its memory does not grow with the damage.
MAX_FINDINGS_PER_CHECK = 1000

# Status of one check, worst last. A report is "fail" (damaged: exit 1), "warn" (sound, but
# something deserves a look: exit 0, or 1 with --strict) or "ok".
OK, SKIPPED, WARN, FAIL = "ok", "skipped", "warn", "fail"
_STATUS_RANK = {OK: 0, SKIPPED: 1, WARN: 2, FAIL: 3}
# Severity of one finding. An "info" finding is reported but changes no status.
ERROR, WARNING, NOTE = "error", "warning", "info"
_SEVERITY_STATUS = {ERROR: FAIL, WARNING: WARN, NOTE: OK}

# Check keys in report order, with their titles.
CHECKS: tuple[tuple[str, str], ...] = (
    ("pages", "Ledger pages (PRAGMA quick_check)"),
    ("tables", "Expected tables and row counts"),
    ("body_archive", "Body archive"),
    ("fs_overflow", "File-monitor overflow windows"),
    ("tool_lifecycle", "Tool lifecycle"),
    ("provider_correlation", "AI provider correlation"),
    ("null_fields", "NULLs in critical fields"),
    ("tool_usage", "Tool usage and origins"),
    ("previews", "Latest rows per table"),
    ("verify_bodies", "Bodies read back through their hashes"),
    ("identity_graph", "Identity graph (model, tool, turn, security and route joins)"),
)

# A value a ledger gives the report: a count, a cell of a table, a location's field.
Value = Any


@dataclass(slots=True)
class Finding:
    """One thing a check found. ``code`` is a stable key; ``message`` the doctor's wording."""

    code: str
    severity: str
    message: str
    count: int | None = None
    # Where the problem is, for findings that have a place: event_id, source_table,
    # direction, block_offset, segment_offset, kind for a body (None where one does not
    # apply), file for a file the check could not read.
    location: dict[str, Value] = field(default_factory=dict)
    # A few of the rows behind a counted finding (ids, event_ids, call_ids ...), so a reader
    # can go straight to them; ``count`` says how many there are in all.
    examples: list[dict[str, Value]] = field(default_factory=list)

    def to_json(self) -> dict[str, Value]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "count": self.count, "location": dict(self.location),
                "examples": [dict(e) for e in self.examples]}


@dataclass(slots=True)
class Table:
    """A small result table (counts, tool usage, previews) kept as plain values."""

    columns: list[str]
    rows: list[list[Value]]

    def to_json(self) -> dict[str, Value]:
        return {"columns": list(self.columns), "rows": [list(r) for r in self.rows]}


@dataclass(slots=True)
class CheckResult:
    """One section of the report: its status, counts, findings and any tables it shows."""

    name: str
    title: str
    status: str = OK
    counts: dict[str, Value] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    findings_total: int = 0
    tables: dict[str, Table] = field(default_factory=dict)
    reason: str | None = None  # why the check was skipped

    def add(self, finding: Finding) -> None:
        self.findings_total += 1
        if len(self.findings) < MAX_FINDINGS_PER_CHECK:
            self.findings.append(finding)
        self.status = _worse(self.status, _SEVERITY_STATUS[finding.severity])

    def skip(self, reason: str) -> None:
        self.status = SKIPPED
        self.reason = reason

    def to_json(self) -> dict[str, Value]:
        return {
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "counts": dict(self.counts),
            "findings_total": self.findings_total,
            "findings": [f.to_json() for f in self.findings],
            "tables": {k: t.to_json() for k, t in self.tables.items()},
        }


@dataclass(slots=True)
class CheckReport:
    """Every check of one ledger, in order. ``sound`` is what the exit code says."""

    db_path: Path
    bodies_path: Path
    session: str
    rows: int
    verify_bodies: bool
    checks: dict[str, CheckResult]
    # What --verify-bodies read back, proved unchanged and skipped (None when it did not run).
    coverage: Coverage | None = None

    @property
    def status(self) -> str:
        worst = OK
        for check in self.checks.values():
            if check.status != SKIPPED:
                worst = _worse(worst, check.status)
        return FAIL if self.ended_early else worst

    @property
    def ended_early(self) -> bool:
        return self.checks["pages"].status == FAIL

    @property
    def sound(self) -> bool:
        return self.status != FAIL

    def exit_code(self, strict: bool = False) -> int:
        if not self.sound:
            return 1
        return 1 if strict and self.status == WARN else 0

    def to_json(self, strict: bool = False) -> dict[str, Value]:
        return {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "session": self.session,
            "db": str(self.db_path),
            "bodies": str(self.bodies_path),
            "rows": self.rows,
            "verify_bodies": self.verify_bodies,
            "status": self.status,
            "sound": self.sound,
            "exit_code": self.exit_code(strict),
            "checks": {name: check.to_json() for name, check in self.checks.items()},
            "coverage": None if self.coverage is None else self.coverage.to_json(),
        }


def _worse(a: str, b: str) -> str:
    return a if _STATUS_RANK[a] >= _STATUS_RANK[b] else b


def report_to_json(report: CheckReport, *, strict: bool = False) -> str:
    """The report as one JSON object with the exact ledger values (digests as hex)."""
    import json   # only --json needs it: a text check starts without it

    return json.dumps(report.to_json(strict), indent=2, default=json_default) + "\n"


def json_default(value: object) -> str:
    """JSON for the values a report holds that json does not know: digests as hex, paths as text."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


__all__ = ["CHECKS", "ERROR", "FAIL", "JSON_FORMAT", "JSON_VERSION", "MAX_FINDINGS_PER_CHECK", "NOTE", "OK",
           "SKIPPED", "WARN", "WARNING", "CheckReport", "CheckResult", "Finding", "Table", "Value", "json_default",
           "report_to_json"]
