"""The doctor's ``check`` report: every integrity check of one ledger, as data, text or JSON.

This module owns ``capsem-ledger check``: resolving which ledger to look at, running the
checks in the doctor's order (page integrity first, then tables and row counts, the body
archive trusting neither the index nor the file, file-monitor overflow, tool lifecycle,
AI-provider correlation, NULLs in critical fields, tool usage and previews, and on request
every body read back through its hash), and rendering the result. ``check_ledger`` builds a
``CheckReport`` (a dataclass tree, no I/O to the terminal); ``render_text`` and
``report_to_json`` turn it into the doctor's text or into one stable JSON object.

Whole-ledger work goes through SQL aggregates and the native index scans and verify kernel;
nothing here makes a Python object per body.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import stat
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from capsem_core import db
from capsem_core.errors import (
    ArchiveError,
    BadBlockHeader,
    BadSegment,
    LedgerError,
    SymlinkRefused,
    TruncatedBlock,
    UnsupportedCodec,
)
from capsem_core.format import (
    FILE_HEADER_BYTES,
    MAX_BLOCK_RAW_BYTES,
    archive_path_for,
    check_file_header,
)
from capsem_core.cli.terminal import Style, colour_wanted, render_table, sanitize

# --- what the doctor looks at ---------------------------------------------------------------

EXPECTED_TABLES: tuple[str, ...] = ("net_events", "model_calls", "tool_calls", "tool_responses", "fs_events")
BODY_INDEX_TABLES: tuple[str, ...] = ("body_blocks", "event_body_blobs")
PROVIDER_DOMAIN_PATTERNS: tuple[str, ...] = ("%.googleapis.com", "%.anthropic.com", "%.openai.com")
PREVIEW_COLUMNS: dict[str, tuple[str, ...]] = {
    "net_events": ("id", "timestamp", "domain", "decision", "method", "path", "status_code", "duration_ms"),
    "model_calls": ("id", "timestamp", "provider", "model", "input_tokens", "output_tokens", "stop_reason",
                    "estimated_cost_usd", "duration_ms"),
    "tool_calls": ("id", "model_call_id", "tool_name", "call_id", "origin"),
    "tool_responses": ("id", "model_call_id", "call_id", "is_error"),
    "fs_events": ("id", "timestamp", "action", "kind", "path", "size"),
}
# (label, WHERE clause, columns it reads) of the doctor's model-data-quality counts.
MODEL_NULL_CHECKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("NULL model", "model IS NULL", ("model",)),
    ("NULL tokens", "input_tokens IS NULL AND output_tokens IS NULL", ("input_tokens", "output_tokens")),
    ("NULL request_body_preview", "request_body_preview IS NULL", ("request_body_preview",)),
)
SQLITE_MAGIC = b"SQLite format 3\x00"
# The largest block offset or extent length the archive check does arithmetic on: any two
# add up without wrapping int64, and no archive comes near it. A larger value is a finding.
MAX_EXTENT_BYTES = (1 << 62) - 1
READ_MMAP_BYTES = 1 << 31
QUICK_CHECK_LINES_SHOWN = 10
PROBLEMS_SHOWN = 5
PREVIEW_CELL_CHARS = 60
# A damaged ledger can hold a million bad rows; the report keeps this many findings per check
# and counts the rest (``findings_total``), so its memory does not grow with the damage.
MAX_FINDINGS_PER_CHECK = 1000
JSON_FORMAT = "capsem-ledger-check"
JSON_VERSION = 1

# Status of one check, worst last. A report is "fail" (damaged: exit 1), "warn" (sound, but
# something deserves a look: exit 0, or 1 with --strict) or "ok".
OK, SKIPPED, WARN, FAIL = "ok", "skipped", "warn", "fail"
_STATUS_RANK = {OK: 0, SKIPPED: 1, WARN: 2, FAIL: 3}
# Severity of one finding. An "info" finding is reported but changes no status.
ERROR, WARNING, NOTE = "error", "warning", "info"
_SEVERITY_STATUS = {ERROR: FAIL, WARNING: WARN, NOTE: OK}

# ``progress(bytes_done, bodies_done)`` while --verify-bodies reads bodies back. A callback that
# also has ``begin(total_bytes, total_bodies)`` and ``end()`` methods is told the totals first
# and the end last (the CLI's progress bar uses them).
ProgressCallback = Callable[[int, int], None]


# --- the report -----------------------------------------------------------------------------

@dataclass(slots=True)
class Finding:
    """One thing a check found. ``code`` is a stable key; ``message`` the doctor's wording."""

    code: str
    severity: str
    message: str
    count: int | None = None
    # Where the problem is, for findings that have a place: event_id, source_table,
    # direction, block_offset, segment_offset, kind (only the keys that apply).
    location: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "count": self.count, "location": dict(self.location)}


@dataclass(slots=True)
class Table:
    """A small result table (counts, tool usage, previews) kept as plain values."""

    columns: list[str]
    rows: list[list[Any]]

    def to_json(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "rows": [list(r) for r in self.rows]}


@dataclass(slots=True)
class CheckResult:
    """One section of the report: its status, counts, findings and any tables it shows."""

    name: str
    title: str
    status: str = OK
    counts: dict[str, Any] = field(default_factory=dict)
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

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "counts": dict(self.counts),
            "findings_total": self.findings_total,
            "findings": [f.to_json() for f in self.findings],
            "tables": {k: t.to_json() for k, t in self.tables.items()},
        }


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
)


@dataclass(slots=True)
class CheckReport:
    """Every check of one ledger, in order. ``sound`` is what the exit code says."""

    db_path: Path
    bodies_path: Path
    session: str
    rows: int
    verify_bodies: bool
    checks: dict[str, CheckResult]

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

    def to_json(self, strict: bool = False) -> dict[str, Any]:
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
        }


def _worse(a: str, b: str) -> str:
    return a if _STATUS_RANK[a] >= _STATUS_RANK[b] else b


# --- opening the ledger ---------------------------------------------------------------------

def _refuse_symlinks(db_path: Path, *, archive: bool) -> None:
    """Refuse a ledger reached through a symbolic link, as ``Ledger`` and the sessions
    resolver do: the session directory (the parent as given, not resolved), session.db and,
    with ``archive``, session.bodies. Nothing is opened first, so a refusal leaves the disk
    as it was (no -wal/-shm sidecars beside a link's target)."""
    paths = [(db_path.parent, "session directory"), (db_path, "session.db")]
    if archive:
        paths.append((archive_path_for(db_path), "session.bodies"))
    for path, what in paths:
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            continue   # missing or unreadable: the open that follows names the problem
        if link:
            raise SymlinkRefused(f"refusing a {what} that is a symbolic link", path)


def _open_read_only(db_path: Path, plan: db.ReadPlan) -> sqlite3.Connection:
    """A read-only connection to ``db_path`` after making sure it is a readable SQLite file.

    Everything that would otherwise surface as an odd sqlite3 message or a traceback (missing,
    directory, unreadable, empty, foreign file) becomes a LedgerError naming the file.
    """
    try:
        st = os.stat(db_path)
    except FileNotFoundError:
        raise LedgerError("no such file", db_path) from None
    except OSError as exc:
        raise LedgerError(f"cannot stat: {exc.strerror}", db_path) from None
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError("not a regular file", db_path)
    try:
        with open(db_path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", db_path) from None
    if not head:
        raise LedgerError("empty file, not a session ledger", db_path)
    if head != SQLITE_MAGIC:
        raise LedgerError("not a SQLite database (the file does not start with the SQLite header)", db_path)
    # check reads what it can and reports an unread -wal itself (check_ledger).
    conn = db.connect_readonly(db_path, plan=plan, allow_unread_wal=True)
    # Read pages through a memory map (SQLite still bounds-checks every page): quick_check
    # and the scans then skip a copy per page, about a tenth of quick_check's time.
    conn.execute(f"PRAGMA mmap_size = {READ_MMAP_BYTES}")
    return conn


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _scalar(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


# --- the checks -----------------------------------------------------------------------------

_DAMAGE_ERRORS = frozenset({"SQLITE_CORRUPT", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE",
                            "SQLITE_CORRUPT_VTAB", "SQLITE_NOTADB"})


def _check_pages(conn: sqlite3.Connection, result: CheckResult) -> None:
    try:
        lines = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        # Damage is a finding; a lock or an I/O failure is not a verdict on the pages.
        if getattr(exc, "sqlite_errorname", "") not in _DAMAGE_ERRORS:
            raise
        lines = [str(exc)]
    result.counts["lines"] = len(lines)
    if lines != ["ok"]:
        for line in lines:
            result.add(Finding("page_damage", ERROR, line))
        # The doctor's headline for this section; the lines above are its body.
        result.counts["damaged"] = True
    else:
        result.counts["damaged"] = False


def _check_tables(conn: sqlite3.Connection, tables: set[str], result: CheckResult) -> dict[str, int]:
    """Row counts of the expected tables that exist (the later checks reuse them)."""
    missing = sorted(t for t in EXPECTED_TABLES if t not in tables)
    result.counts["missing"] = missing
    rows: list[list[Any]] = []
    for table in EXPECTED_TABLES:
        if table in tables:
            n = int(_scalar(conn, f"SELECT COUNT(*) FROM {table}"))
            result.counts[table] = n
            rows.append([table, n])
        else:
            result.counts[table] = None
            rows.append([table, "MISSING"])
    result.tables["event_counts"] = Table(["table", "rows"], rows)
    if missing:
        result.add(Finding("missing_tables", ERROR, "Missing tables: " + ", ".join(missing),
                           count=len(missing)))
    return {table: n for table, n in rows if isinstance(n, int)}


@dataclass(slots=True)
class _BodyIndex:
    """The body index as arrays (native scans): what the archive check and verify share."""

    blocks: dict[str, Any]   # block_offset, raw_len, disk_len; ordered by block_offset
    bodies: dict[str, Any]   # id, block_offset, body_offset, body_len, digest, hash_ok; archive order
    archive_sound: bool = False


def _check_body_archive(tables: set[str], db_path: Path, bodies_path: Path,
                        result: CheckResult, plan: db.ReadPlan) -> _BodyIndex | None:
    if not all(t in tables for t in BODY_INDEX_TABLES):
        result.add(Finding("no_body_index", ERROR, "No body index: this ledger predates the body archive"))
        return None
    import numpy as np

    from capsem_core import index as _index

    # A live writer may commit between any two of the reads below, and each read is its own
    # snapshot. The body index only grows: rows are added (or replaced under new ids) and a
    # block's extent and raw_len only grow, and a writer syncs a segment before committing
    # the rows that name it. So read the bodies first, then the blocks, then the archive's
    # size (and map it for --verify-bodies only after that): every body then names a block
    # recorded at least as late as itself, whose extent holds it and lies inside the file.
    # The other order sees a flush's bodies without its blocks: false damage.
    bodies = _index.scan_bodies(db_path, plan=plan)
    blocks = _index.scan_blocks(db_path, plan=plan)
    index = _BodyIndex(blocks, bodies)
    k_off, k_raw, k_disk = (blocks[k] for k in ("block_offset", "raw_len", "disk_len"))
    b_blk, b_off, b_len = (bodies[k] for k in ("block_offset", "body_offset", "body_len"))

    # Every value is bounded before numpy adds it to another, so no sum can wrap int64: a
    # block row out of bounds is its own finding and takes no part in the sums and walks below.
    sane = _check_block_rows(k_off, k_raw, k_disk, result)
    s_off, s_disk = k_off[sane], k_disk[sane]
    s_end = s_off + s_disk
    blocks_end = int(s_end.max()) if len(s_off) else 0
    result.counts.update(bodies=int(len(b_blk)), blocks=int(len(k_off)), blocks_end=blocks_end,
                         archive_bytes=None, extents_walked=0)

    # The index against itself: every body names a recorded block and fits in its raw bytes.
    slot = np.searchsorted(k_off, b_blk)
    inside = slot < len(k_off)
    recorded = np.zeros(len(b_blk), dtype=bool)
    recorded[inside] = k_off[slot[inside]] == b_blk[inside]
    dangling = int(len(b_blk) - np.count_nonzero(recorded))
    if dangling:
        result.add(Finding("dangling_block", ERROR,
                           f"{dangling} bodies name a block body_blocks does not record", count=dangling))
    in_bounds = (b_off >= 0) & (b_off <= MAX_BLOCK_RAW_BYTES) & (b_len >= 0) & (b_len <= MAX_BLOCK_RAW_BYTES)
    stray = int(len(b_blk) - np.count_nonzero(in_bounds))
    if stray:
        result.add(Finding("span_out_of_range", ERROR,
                           f"{stray} bodies record a span no block can hold (body_offset and body_len must "
                           f"each lie in 0..{MAX_BLOCK_RAW_BYTES}, a block's most raw bytes)", count=stray))
    fits = recorded & in_bounds
    overruns = int(np.count_nonzero(b_off[fits] + b_len[fits] > k_raw[slot[fits]]))
    if overruns:
        result.add(Finding("body_past_raw_len", ERROR,
                           f"{overruns} bodies run past the end of their block's raw bytes", count=overruns))

    # The blocks against each other: none may start inside the file header or inside the
    # extent of the block before it (the doctor does not look at this).
    for i in np.flatnonzero(s_off < FILE_HEADER_BYTES).tolist():
        off = int(s_off[i])
        result.add(Finding("block_in_file_header", ERROR,
                           f"block at offset {off} starts inside the {FILE_HEADER_BYTES}-byte file header",
                           location={"block_offset": off}))
    for i in (np.flatnonzero(s_off[1:] < s_end[:-1]) + 1).tolist():
        off, prev = int(s_off[i]), int(s_off[i - 1])
        result.add(Finding("block_overlap", ERROR,
                           f"block at offset {off} starts inside the block at offset {prev}, "
                           f"which ends at {int(s_end[i - 1])}",
                           location={"block_offset": off}))

    # The file against the index.
    try:
        st = os.lstat(bodies_path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise LedgerError(f"cannot stat: {exc.strerror}", bodies_path) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        result.add(Finding("archive_not_regular", ERROR,
                           f"session.bodies is {what}; a ledger's archive must be a regular file beside session.db"))
        return index
    size = None if st is None else st.st_size
    if size is None:
        if len(k_off) > 0:
            result.add(Finding("archive_missing", ERROR,
                               f"session.bodies is missing and {len(k_off)} blocks are recorded"))
        return index
    result.counts["archive_bytes"] = size
    if size < blocks_end:
        result.add(Finding("archive_short", ERROR,
                           f"session.bodies is {size} bytes but its last recorded block ends at {blocks_end}"))
        return index
    try:
        with open(bodies_path, "rb") as f:
            head = f.read(FILE_HEADER_BYTES)
        check_file_header(head, bodies_path)
    except LedgerError as exc:
        result.add(Finding("bad_file_header", ERROR, f"{bodies_path} is not a capsem body archive ({exc.detail})"))
        return index
    except OSError as exc:
        raise LedgerError(f"cannot read: {exc.strerror}", bodies_path) from None
    _walk_extents(index, sane, bodies_path, result)
    index.archive_sound = result.findings_total == 0
    return index


def _check_block_rows(k_off: Any, k_raw: Any, k_disk: Any, result: CheckResult) -> Any:
    """A finding for every body_blocks value outside its bounds; returns the mask of rows
    within them. A block holds at most MAX_BLOCK_RAW_BYTES raw bytes; an offset or extent
    length must lie in 0..MAX_EXTENT_BYTES, so any offset plus length fits in int64 (a value
    in bounds but past the file's end is found against the file's size, not here)."""
    import numpy as np

    bad_off = (k_off < 0) | (k_off > MAX_EXTENT_BYTES)
    bad_raw = (k_raw < 0) | (k_raw > MAX_BLOCK_RAW_BYTES)
    bad_disk = (k_disk < 0) | (k_disk > MAX_EXTENT_BYTES)
    bad = bad_off | bad_raw | bad_disk
    for i in np.flatnonzero(bad).tolist():
        off = int(k_off[i])
        if bad_off[i]:
            where = "before the start of session.bodies" if off < 0 else "beyond the end of any archive"
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} starts {where} (block offsets lie in 0..{MAX_EXTENT_BYTES})",
                               location={"block_offset": off}))
        if bad_raw[i]:
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} records raw_len {int(k_raw[i])}, outside "
                               f"0..{MAX_BLOCK_RAW_BYTES} (a block's most raw bytes)",
                               location={"block_offset": off}))
        if bad_disk[i]:
            result.add(Finding("block_out_of_range", ERROR,
                               f"block at offset {off} records disk_len {int(k_disk[i])}, outside "
                               f"0..{MAX_EXTENT_BYTES}", location={"block_offset": off}))
    return ~bad


def _walk_extents(index: _BodyIndex, sane: Any, bodies_path: Path, result: CheckResult) -> None:
    """Every recorded extent within bounds must be a well-formed segment chain ending exactly
    at its ``disk_len``, holding exactly its ``raw_len`` (headers only: nothing is inflated)."""
    from capsem_core._native import _archive

    k_off, k_raw, k_disk = (index.blocks[k][sane] for k in ("block_offset", "raw_len", "disk_len"))
    walked = 0
    with _archive.ArchiveReader(bodies_path) as reader:
        for off, raw_len, disk_len in zip(k_off.tolist(), k_raw.tolist(), k_disk.tolist()):
            try:
                _, seg_raw, _, _ = reader.walk_extent(off, disk_len)
            except LedgerError as exc:
                if not isinstance(exc, ArchiveError):
                    raise
                result.add(Finding("bad_extent", ERROR,
                                   f"block at offset {off} (extent of {disk_len} bytes): {exc.detail}",
                                   location={"block_offset": off, "kind": _ERROR_KINDS.get(type(exc), "archive")}))
                continue
            walked += 1
            if seg_raw != raw_len:
                result.add(Finding("raw_len_mismatch", ERROR,
                                   f"block at offset {off} records raw_len {raw_len} but its segments hold "
                                   f"{seg_raw} raw bytes", location={"block_offset": off}))
    result.counts["extents_walked"] = walked


_ERROR_KINDS: dict[type, str] = {
    BadBlockHeader: "bad_block_header", UnsupportedCodec: "unsupported_codec", BadSegment: "bad_segment",
    TruncatedBlock: "truncated",
}


def _check_fs_overflow(conn: sqlite3.Connection, tables: set[str], result: CheckResult) -> None:
    if "fs_events" not in tables:
        result.skip("fs_events is missing")
        return
    windows, deferred = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM fs_events WHERE action = 'overflow'").fetchone()
    result.counts.update(windows=int(windows), deferred=int(deferred))
    if windows:
        result.add(Finding("fs_overflow", NOTE,
                           f"File monitor held {deferred} changes over to a later scan in {windows} "
                           f"overflowing windows (fs_events action 'overflow')", count=int(windows)))


def _check_tool_lifecycle(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                          result: CheckResult) -> None:
    if "tool_calls" not in tables or "tool_responses" not in tables:
        result.skip("tool_calls or tool_responses is missing")
        return
    calls, responses = row_counts["tool_calls"], row_counts["tool_responses"]
    # A call and its response share call_id within one trace (IS: both may lack a trace). The
    # unary + keeps SQLite on the call_id index: a trace holds thousands of rows.
    unanswered = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_calls AS c WHERE NOT EXISTS (
            SELECT 1 FROM tool_responses AS r WHERE r.call_id = c.call_id AND +r.trace_id IS c.trace_id)"""))
    orphaned = int(_scalar(conn, """
        SELECT COUNT(*) FROM tool_responses AS r WHERE NOT EXISTS (
            SELECT 1 FROM tool_calls AS c WHERE c.call_id = r.call_id AND +c.trace_id IS r.trace_id)"""))
    result.counts.update(tool_calls=calls, tool_responses=responses,
                         calls_without_responses=unanswered, responses_without_calls=orphaned,
                         calls_missing_model_call=None, responses_missing_model_call=None)
    # A call still waiting for its result is normal mid-session: a warning, as the doctor has it.
    if unanswered:
        result.add(Finding("calls_without_responses", WARNING,
                           f"tool_calls without responses: {unanswered}/{calls}", count=unanswered))
    # A response must answer a call of its own trace; one that does not is a broken ledger.
    if orphaned:
        result.add(Finding("responses_without_calls", ERROR,
                           f"tool_responses without calls: {orphaned}/{responses}", count=orphaned))
    if "model_calls" in tables:
        missing_call = int(_scalar(conn, """
            SELECT COUNT(*) FROM tool_calls AS c WHERE c.model_call_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM model_calls AS m WHERE m.id = c.model_call_id)"""))
        missing_resp = int(_scalar(conn, """
            SELECT COUNT(*) FROM tool_responses AS r WHERE r.model_call_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM model_calls AS m WHERE m.id = r.model_call_id)"""))
        result.counts.update(calls_missing_model_call=missing_call, responses_missing_model_call=missing_resp)
        if missing_call:
            result.add(Finding("calls_missing_model_call", ERROR,
                               f"tool_calls naming a model call model_calls does not record: {missing_call}/{calls}",
                               count=missing_call))
        if missing_resp:
            result.add(Finding("responses_missing_model_call", ERROR,
                               f"tool_responses naming a model call model_calls does not record: "
                               f"{missing_resp}/{responses}", count=missing_resp))


def _check_provider_correlation(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                                result: CheckResult) -> None:
    if "net_events" not in tables or "model_calls" not in tables:
        result.skip("net_events or model_calls is missing")
        return
    where = " OR ".join("domain LIKE ?" for _ in PROVIDER_DOMAIN_PATTERNS)
    provider = int(_scalar(conn, f"SELECT COUNT(*) FROM net_events WHERE {where}", PROVIDER_DOMAIN_PATTERNS))
    model = row_counts["model_calls"]
    result.counts.update(provider_net_events=provider, model_calls=model)
    if provider > 0 and model == 0:
        result.add(Finding("provider_without_model_calls", WARNING,
                           f"Found {provider} AI-provider net_events but 0 model_calls -- "
                           f"stream parsing may have failed", count=provider))


def _check_null_fields(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                       result: CheckResult) -> None:
    if "model_calls" not in tables:
        result.skip("model_calls is missing")
        return
    columns = _columns(conn, "model_calls")
    total = row_counts["model_calls"]
    result.counts["model_calls"] = total
    if total == 0:
        return
    # One pass over model_calls for all three counts.
    usable = [(label, clause) for label, clause, needs in MODEL_NULL_CHECKS if all(c in columns for c in needs)]
    if not usable:
        result.skip("model_calls has none of the checked columns")
        return
    select = ", ".join(f"COALESCE(SUM({clause}), 0)" for _, clause in usable)
    counts = conn.execute(f"SELECT {select} FROM model_calls").fetchone()
    for (label, _), n in zip(usable, counts):
        result.counts[label] = int(n)
        if n:
            result.add(Finding(label.replace(" ", "_").lower(), WARNING, f"{label}: {int(n)}/{total}",
                               count=int(n)))


def _check_tool_usage(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int],
                      result: CheckResult) -> None:
    if "tool_calls" not in tables:
        result.skip("tool_calls is missing")
        return
    columns = _columns(conn, "tool_calls")
    total = row_counts["tool_calls"]
    result.counts["tool_calls"] = total
    if total and "origin" in columns:
        origins = conn.execute(
            "SELECT origin, COUNT(*) AS n FROM tool_calls GROUP BY origin ORDER BY n DESC, origin").fetchall()
        result.tables["origins"] = Table(["origin", "count"], [[o, int(n)] for o, n in origins])
    wanted = ("tool_name", "origin", "decision", "duration_ms")
    if all(c in columns for c in wanted):
        usage = conn.execute("""
            SELECT tool_name, origin, decision, COUNT(*) AS count, ROUND(AVG(duration_ms), 1) AS avg_ms
            FROM tool_calls WHERE tool_name IS NOT NULL
            GROUP BY tool_name, origin, decision ORDER BY count DESC, tool_name""").fetchall()
        if usage:
            result.tables["usage"] = Table(["tool_name", "origin", "decision", "count", "avg_ms"],
                                           [list(r) for r in usage])


def _check_previews(conn: sqlite3.Connection, tables: set[str], row_counts: dict[str, int], rows: int,
                    result: CheckResult) -> None:
    for table in EXPECTED_TABLES:
        if table not in tables:
            continue
        present = _columns(conn, table)
        cols = [c for c in PREVIEW_COLUMNS[table] if c in present]
        result.counts[table] = row_counts[table]
        order = "id DESC" if "id" in present else "rowid DESC"
        shown = conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order} LIMIT ?",
                             (max(rows, 0),)).fetchall() if cols else []
        result.tables[table] = Table(cols, [list(r) for r in shown])


# --- running everything ---------------------------------------------------------------------

def check_ledger(db_path: os.PathLike[str] | str, *, rows: int = 5, verify_bodies: bool = False,
                 progress: ProgressCallback | None = None) -> CheckReport:
    """Run every check on the ledger whose ``session.db`` is ``db_path``.

    Raises LedgerError (naming the file) when the file cannot be checked at all: missing,
    unreadable, locked, not SQLite, or written by another build; SymlinkRefused when
    session.db or its directory is a symbolic link. A damaged ledger is not an error: it is a
    report whose ``sound`` is False.
    """
    db_path = Path(db_path)
    bodies_path = archive_path_for(db_path)
    report = CheckReport(db_path=db_path, bodies_path=bodies_path, session=db_path.absolute().parent.name,
                         rows=rows, verify_bodies=verify_bodies,
                         checks={name: CheckResult(name, title) for name, title in CHECKS})
    checks = report.checks
    # A symlinked session.bodies stays a finding of the report (it is never read through);
    # the CLI refuses it up front.
    _refuse_symlinks(db_path, archive=False)
    # One read-only decision (db.py's) for every connection of this check, native ones too.
    plan = db.read_plan(db_path)
    if plan.unread_wal is not None:
        checks["tables"].add(Finding("wal_not_read", ERROR,
                                     f"{plan.unread_wal.describe()}; every count below is of session.db alone "
                                     "and misses those commits (copy the ledger with its -wal to writable "
                                     "storage to check all of it)", count=plan.unread_wal.commits,
                                     location={"file": str(plan.unread_wal.path)}))
    conn = _open_read_only(db_path, plan)
    pages_conn = _open_read_only(db_path, plan)
    # quick_check is one long single-threaded pass over every page; the other checks run
    # meanwhile on their own connection and are thrown away if it finds damage, so the
    # report reads as if it had gone first (and a damaged file still ends it).
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capsem-quick-check")
    pages = pool.submit(_check_pages, pages_conn, checks["pages"])
    try:
        failure: LedgerError | None = None
        try:
            _run_other_checks(conn, db_path, bodies_path, report, progress, plan)
        except LedgerError as exc:
            failure = exc
        except sqlite3.Error as exc:
            failure = LedgerError(_sqlite_message(exc), db_path)
        try:
            pages.result()
        except sqlite3.Error as exc:
            raise LedgerError(_sqlite_message(exc), db_path) from None
        if checks["pages"].status == FAIL:
            for name, title in CHECKS:
                if name != "pages":
                    checks[name] = CheckResult(name, title)
                    checks[name].skip("the ledger's pages are damaged")
            return report
        if failure is not None:
            raise failure
    finally:
        if not pages.done():
            pages_conn.interrupt()
        pool.shutdown(wait=True)
        pages_conn.close()
        conn.close()
    return report


def _run_other_checks(conn: sqlite3.Connection, db_path: Path, bodies_path: Path, report: CheckReport,
                      progress: ProgressCallback | None, plan: db.ReadPlan) -> None:
    """Everything after page integrity, in the report's order."""
    checks = report.checks
    # The SQL checks share one read transaction: a writer committing meanwhile cannot make
    # one count disagree with another (a response counted whose call was not, a total below
    # its part). The body archive reads its own snapshots in the order it explains; the
    # transaction ends before --verify-bodies, so a long verify keeps no snapshot open.
    conn.execute("BEGIN")
    try:
        _refuse_other_builds(conn, db_path)
        tables = _table_names(conn)
        row_counts = _check_tables(conn, tables, checks["tables"])
        index = _check_body_archive(tables, db_path, bodies_path, checks["body_archive"], plan)
        _check_fs_overflow(conn, tables, checks["fs_overflow"])
        _check_tool_lifecycle(conn, tables, row_counts, checks["tool_lifecycle"])
        _check_provider_correlation(conn, tables, row_counts, checks["provider_correlation"])
        _check_null_fields(conn, tables, row_counts, checks["null_fields"])
        _check_tool_usage(conn, tables, row_counts, checks["tool_usage"])
        _check_previews(conn, tables, row_counts, report.rows, checks["previews"])
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    verify = checks["verify_bodies"]
    if not report.verify_bodies:
        verify.skip("not requested (--verify-bodies reads every body back through its hash)")
    elif index is None or not index.archive_sound:
        verify.skip("the body index and archive disagree; bodies are not read until they agree")
    else:
        _verify_bodies(db_path, bodies_path, index, verify, progress)


def _sqlite_message(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{text} (another process holds a lock on the ledger; try again when it is idle)"
    return text


def _refuse_other_builds(conn: sqlite3.Connection, db_path: Path) -> None:
    from capsem_core import schema

    schema.check_schema(conn, db_path)


def _verify_bodies(db_path: Path, bodies_path: Path, index: _BodyIndex, result: CheckResult,
                   progress: ProgressCallback | None) -> None:
    """Every body read back through its segments' hashes and its own (the native kernel)."""
    from capsem_core import verify as _verify
    from capsem_core._native import _archive

    bodies = index.bodies
    total = int(len(bodies["id"]))
    result.counts.update(bodies=total, verified=0, body_bytes=int(bodies["body_len"].sum()) if total else 0)
    if total == 0:
        return
    begin, end = getattr(progress, "begin", None), getattr(progress, "end", None)
    if begin is not None:
        begin(result.counts["body_bytes"], total)
    try:
        outcome = _archive.verify_bodies(bodies_path, index.blocks, bodies, progress=progress)
    finally:
        if end is not None:
            end()
    failures = _verify.findings_of(outcome, bodies, db_path)
    result.counts["verified"] = total - len(failures)
    for f in failures:
        location = {"event_id": f.event_id, "source_table": f.source_table, "direction": f.direction,
                    "block_offset": f.block_offset, "segment_offset": f.segment_offset, "kind": f.kind}
        result.add(Finding(f.kind, ERROR, f.message, location=location))


# --- text rendering -------------------------------------------------------------------------

_SEVERITY_STYLE = {ERROR: "red", WARNING: "yellow", NOTE: "yellow"}


def render_text(report: CheckReport, *, colour: bool = False) -> str:
    """The report as the doctor prints it (sections, order and wording).

    Every string that came from the ledger or the disk (the session label and path, finding
    messages quoting values, table cells) goes through ``terminal.sanitize``: the text is
    safe to print, and the only escape sequences in it are Style's own. ``--json`` keeps the
    exact values."""
    s = Style(colour)
    c = report.checks
    out: list[str] = ["", s("bold_cyan", f"Session: {sanitize(report.session)}"),
                      s("dim", f"  {sanitize(report.db_path)}"), ""]

    pages = c["pages"]
    if pages.status == FAIL:
        out.append(s("red", "  Ledger pages damaged (quick_check):"))
        for f in pages.findings[:QUICK_CHECK_LINES_SHOWN]:
            out.append(s("red", f"    {sanitize(f.message)}"))
        out.append("")
        out.append(s("red", "Ledger damaged: the report ends at page integrity."))
        return "\n".join(out) + "\n"
    out.append(s("green", "  Ledger pages intact (quick_check)"))

    tables = c["tables"]
    missing = tables.counts.get("missing") or []
    out.append(s("red", "  Missing tables: " + ", ".join(map(sanitize, missing))) if missing
               else s("green", "  All expected tables present"))
    for f in tables.findings:   # an unread -wal: the counts below are of session.db alone
        if f.code != "missing_tables":
            out.append(s(_SEVERITY_STYLE[f.severity], f"  {f.message}"))
    out.append("")
    out.append(s("bold", "Event counts:"))
    counts = tables.tables["event_counts"]
    render_table(out, s, counts.columns, counts.rows)

    _render_archive(out, s, c["body_archive"], c["verify_bodies"], report.verify_bodies)

    fs = c["fs_overflow"]
    for f in fs.findings:
        out.append(s("yellow", f"  {sanitize(f.message)}"))
        out.append("")

    tools = c["tool_lifecycle"]
    if tools.status != SKIPPED:
        for f in tools.findings:
            out.append(s(_SEVERITY_STYLE[f.severity], f"  {sanitize(f.message)}"))
        total = tools.counts.get("tool_calls", 0)
        if not tools.findings and total:
            out.append(s("green", f"  All {total} tool_calls have matching responses"))
        if tools.findings or total:
            out.append("")

    prov = c["provider_correlation"]
    if prov.status != SKIPPED:
        if prov.findings:
            out.append(s("red", f"  {sanitize(prov.findings[0].message)}"))
            out.append("")
        elif prov.counts.get("model_calls"):
            out.append(s("green", f"  {prov.counts['model_calls']} model_calls from "
                                  f"{prov.counts['provider_net_events']} AI-provider net_events"))
            out.append("")

    nulls = c["null_fields"]
    total = nulls.counts.get("model_calls", 0)
    if nulls.status != SKIPPED and total:
        if nulls.findings:
            out.append(s("yellow", "  Data quality warnings:"))
            for f in nulls.findings:
                out.append(s("yellow", f"    {sanitize(f.message)}"))
        else:
            out.append(s("green", f"  All {total} model_calls have model, tokens, and preview populated"))
        out.append("")

    usage = c["tool_usage"]
    if usage.status != SKIPPED:
        origins = usage.tables.get("origins")
        if origins and origins.rows:
            parts = ", ".join(f"{sanitize(n)} {sanitize(o)}" for o, n in origins.rows)
            out.append(s("cyan", f"  Tool origins: {parts} ({usage.counts['tool_calls']} total)"))
        if usage.counts.get("tool_calls"):
            out.append("")
        if "usage" in usage.tables:
            out.append(s("bold", "Tool usage:"))
            usage_table = usage.tables["usage"]
            render_table(out, s, usage_table.columns, usage_table.rows)

    previews = c["previews"]
    for table, preview in previews.tables.items():
        total = previews.counts[table]
        out.append(s("bold", f"{sanitize(table)} ({total} total, showing last {len(preview.rows)}):"))
        render_table(out, s, preview.columns, preview.rows, PREVIEW_CELL_CHARS)

    verdict = {OK: ("green", "Ledger sound."),
               WARN: ("yellow", "Ledger sound, with warnings."), FAIL: ("red", "Ledger damaged.")}
    style, text = verdict.get(report.status, ("red", "Ledger damaged."))
    out.append(s(style, text))
    return "\n".join(out) + "\n"


def _render_archive(out: list[str], s: Style, archive: CheckResult, verify: CheckResult, requested: bool) -> None:
    out.append(s("bold", "Body archive:"))
    codes = {f.code for f in archive.findings}
    if "no_body_index" in codes:
        out.append(s("red", "  No body index: this ledger predates the body archive"))
        out.append("")
        return
    counts = archive.counts
    out.append(f"  {counts['bodies']} bodies indexed in {counts['blocks']} blocks")
    if counts.get("archive_bytes") is not None:
        out.append(f"  session.bodies: {counts['archive_bytes']} bytes, blocks end at {counts['blocks_end']}")
    problems = list(archive.findings)
    problems_total = archive.findings_total
    if verify.status not in (SKIPPED,) and verify.findings_total:
        problems, problems_total = list(verify.findings), verify.findings_total
    for f in problems[:PROBLEMS_SHOWN]:
        out.append(s("red", f"  {sanitize(f.message)}"))
    if problems_total > PROBLEMS_SHOWN:
        out.append(s("red", f"  ... and {problems_total - PROBLEMS_SHOWN} more"))
    if not problems_total:
        out.append(s("green", "  Index and archive agree"))
    if verify.status != SKIPPED:
        verified = verify.counts.get("verified", 0)
        line = f"  {verified}/{counts['bodies']} bodies read back and match their hashes"
        out.append(s("green" if not verify.findings_total else "red", line))
    elif requested:
        # Asked for but not run: say so, or the report reads as if the bodies were fine.
        out.append(s("yellow", f"  --verify-bodies skipped: {sanitize(verify.reason)}"))
    elif not problems_total:
        out.append(s("dim", "  (--verify-bodies reads every body back through its hash)"))
    out.append("")


class VerifyProgressBar:
    """A rich progress bar on stderr for --verify-bodies: bytes, bodies and throughput."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._progress: Any = None
        self._task: Any = None
        self._total_bodies = 0

    def begin(self, total_bytes: int, total_bodies: int) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self._total_bodies = total_bodies
        self._progress = Progress(
            TextColumn("verifying"), BarColumn(), DownloadColumn(),
            TextColumn("{task.fields[bodies]:,}/{task.fields[total_bodies]:,} bodies"),
            TransferSpeedColumn(), TimeRemainingColumn(),
            console=Console(file=self._stream, no_color=bool(os.environ.get("NO_COLOR"))), transient=True)
        self._task = self._progress.add_task("verify", total=max(total_bytes, 1), bodies=0,
                                             total_bodies=total_bodies)
        self._progress.start()

    def __call__(self, bytes_done: int, bodies_done: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=bytes_done, bodies=bodies_done)

    def end(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def report_to_json(report: CheckReport, *, strict: bool = False) -> str:
    return json.dumps(report.to_json(strict), indent=2, default=_json_default) + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# --- command line ---------------------------------------------------------------------------

def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", metavar="SESSION",
                        help="session id, or a named VM's name (default: the latest session in main.db)")
    parser.add_argument("-n", "--rows", type=_non_negative, default=5, metavar="N",
                        help="preview rows per table (default 5)")
    parser.add_argument("--list", action="store_true",
                        help="list recent sessions from main.db and exit (takes precedence over the other options)")
    parser.add_argument("--db", type=Path, metavar="PATH",
                        help="check this session.db, or the ledger directory holding it, directly (main.db is not "
                             "read; not together with SESSION)")
    parser.add_argument("--verify-bodies", action="store_true",
                        help="also read every archived body back through its hash (skipped, and said so, when "
                             "the index and the archive disagree)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with the exact ledger values instead of the text report "
                             "(whose ledger strings are escaped for the terminal)")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too, not only on damage")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError("the row count cannot be negative")
    return value


def _session_table(rows: Sequence[Any], with_usage: bool) -> Table:

    columns = ["id", "mode", "status", "created_at", "requests", "in_tokens", "out_tokens", "cost"]
    if with_usage:
        columns += ["tools", "files"]
    out = []
    for r in rows:
        # Strings from main.db are data, not trusted text (capsem_core.cli.terminal).
        line = [sanitize(r.id), sanitize(r.mode), sanitize(r.status), sanitize(r.created_at),
                f"{r.allowed_requests}/{r.total_requests}",
                r.total_input_tokens, r.total_output_tokens, f"${r.total_estimated_cost:.4f}"]
        if with_usage:
            line += [r.total_tool_calls, r.total_file_events]
        out.append(line)
    return Table(columns, out)


def _print_sessions(rows: Sequence[Any], with_usage: bool, colour: bool) -> None:
    s = Style(colour)
    out = ["", s("bold", "Recent sessions:")]
    sessions = _session_table(rows, with_usage)
    render_table(out, s, sessions.columns, sessions.rows)
    sys.stdout.write("\n".join(out) + "\n")


def _error(message: str, colour: bool) -> int:
    print(Style(colour)("red", sanitize(message)), file=sys.stderr)
    return 1


def run_check(args: argparse.Namespace) -> int:
    from capsem_core import sessions

    out_colour = not args.json and colour_wanted(sys.stdout)
    err_colour = colour_wanted(sys.stderr)
    if args.list:
        main_db = sessions.main_db_path()
        if not main_db.exists():
            return _error(f"main.db not found at {main_db}", err_colour)
        recent = sessions.recent_sessions(main_db, 5)
        if not recent:
            return _error("No sessions found", err_colour)
        if args.json:
            sys.stdout.write(json.dumps({"format": "capsem-ledger-sessions", "version": 1,
                                         "main_db": str(main_db),
                                         "sessions": [_session_json(r) for r in recent]}, indent=2) + "\n")
        else:
            _print_sessions(recent, True, out_colour)
        return 0

    if args.db is not None:
        if args.session is not None:
            from capsem_core.cli.errors import UsageError

            raise UsageError(f"give a SESSION or --db PATH, not both (got {args.session!r} and --db {args.db})")
        db_path = _db_argument(args.db)
    else:
        # The doctor shows the recent sessions before resolving; the resolver itself finds an
        # explicit id or name without main.db, so main.db is only required for "latest".
        main_db = sessions.main_db_path()
        if not args.json and main_db.exists():
            recent = sessions.recent_sessions(main_db, 5)
            if recent:
                _print_sessions(recent, False, out_colour)
        try:
            ref = sessions.resolve_session(args.session)
        except LedgerError as exc:
            message = exc.detail if exc.path is None or str(exc.path) in exc.detail else str(exc)
            return _error(message + _db_hint(args.session), err_colour)
        db_path = ref.db_path

    _refuse_symlinks(Path(db_path), archive=True)
    bar = VerifyProgressBar() if args.verify_bodies and sys.stderr.isatty() else None
    try:
        report = check_ledger(db_path, rows=args.rows, verify_bodies=args.verify_bodies, progress=bar)
    finally:
        if bar is not None:
            bar.end()
    if args.json:
        sys.stdout.write(report_to_json(report, strict=args.strict))
    else:
        sys.stdout.write(render_text(report, colour=out_colour))
    return report.exit_code(args.strict)


def _db_argument(path: Path) -> Path:
    """``--db`` names session.db, or the ledger directory holding it."""
    return path / "session.db" if path.is_dir() else path


def _db_hint(word: str | None) -> str:
    """"; did you mean --db WORD?" when a SESSION word that resolved to nothing is a ledger
    directory (or a session.db) on disk, else ""."""
    if not word:
        return ""
    p = Path(word)
    if (p / "session.db").is_file() or (p.name == "session.db" and p.is_file()):
        return f"; did you mean --db {word}?"
    return ""


def _session_json(row: Any) -> dict[str, Any]:
    from capsem_core import sessions

    # Capsem's main.db records no name: it comes from the run directory or capsem-core's sidecar.
    return {"id": row.id, "name": sessions.vm_name(row.id), "mode": row.mode, "status": row.status,
            "created_at": row.created_at, "stopped_at": row.stopped_at,
            "total_requests": row.total_requests, "allowed_requests": row.allowed_requests,
            "denied_requests": row.denied_requests, "total_input_tokens": row.total_input_tokens,
            "total_output_tokens": row.total_output_tokens, "total_estimated_cost": row.total_estimated_cost,
            "total_tool_calls": row.total_tool_calls, "total_file_events": row.total_file_events}
