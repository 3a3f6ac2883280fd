"""The doctor's ``check`` report: every integrity check of one ledger, as data or JSON.

``check_ledger`` runs the checks in the doctor's order (page integrity first, then tables and
row counts, the body archive trusting neither the index nor the file, file-monitor overflow,
tool lifecycle, AI-provider correlation, NULLs in critical fields, tool usage and previews,
on request every body read back through its hash, and after the doctor's sections the
identity graph: the specification's join contract, and main.db's totals against the ledger
when it is reached through a home) and returns a ``CheckReport``; ``report_to_json`` turns
it into one stable JSON object. Whole-ledger work goes through SQL aggregates and the native
index scans and verify kernel; nothing here makes a Python object per body.

The house: ``run`` (the ledger's snapshot opened, the report's steps declared), ``steps``
(the scheduler that runs them), ``report`` (the model and its JSON form), ``sql_checks``
(what the tables say), ``archive`` (the body index against itself and the file), ``verify``
(the --verify-bodies step), ``incremental``, ``record`` and ``subset`` (verifying less),
``identity`` and ``route`` (the identity graph). The page check is ``capsem_core.pages``; the
text and the command line are ``capsem_core.cli.check_text`` and ``capsem_core.cli.check``.
"""

from __future__ import annotations

from capsem_core.check.archive import BODY_INDEX_TABLES, MAX_EXTENT_BYTES
from capsem_core.snapshot import READ_MMAP_BYTES, SQLITE_MAGIC
from capsem_core.check.report import (
    CHECKS,
    ERROR,
    FAIL,
    JSON_FORMAT,
    JSON_VERSION,
    MAX_FINDINGS_PER_CHECK,
    NOTE,
    OK,
    SKIPPED,
    WARN,
    WARNING,
    CheckReport,
    CheckResult,
    Finding,
    Table,
    report_to_json,
)
from capsem_core.check.route import SessionRoute
from capsem_core.check.run import check_ledger
from capsem_core.check.sql_checks import EXPECTED_TABLES, MODEL_NULL_CHECKS, PREVIEW_COLUMNS, PROVIDER_DOMAIN_PATTERNS
from capsem_core.check.verify import ProgressCallback

__all__ = [
    "BODY_INDEX_TABLES", "CHECKS", "ERROR", "EXPECTED_TABLES", "FAIL", "JSON_FORMAT", "JSON_VERSION",
    "MAX_EXTENT_BYTES", "MAX_FINDINGS_PER_CHECK", "MODEL_NULL_CHECKS", "NOTE", "OK",
    "PREVIEW_COLUMNS", "PROVIDER_DOMAIN_PATTERNS", "READ_MMAP_BYTES",
    "SKIPPED", "SQLITE_MAGIC", "SessionRoute", "WARN", "WARNING", "CheckReport", "CheckResult", "Finding", "ProgressCallback",
    "Table", "check_ledger", "report_to_json",
]
