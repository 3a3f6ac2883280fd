"""What a fleet run found: one ``LedgerResult`` per ledger, and the ``FleetReport`` of them all.

A ledger's result holds the ``CheckReport`` its check gave (the very report ``check`` prints)
or, when it could not be checked at all, the one-line reason; how long it took, where it ran,
and how many times it was started (a task whose worker died is run again, and says why). The
verdict of a ledger is its report's ("ok", "warn", "damaged") or "unreadable". The report also
holds every directory found or given that was not checked (``discover.Unchecked``). The run is
``sound`` only when at least one ledger was checked, none is damaged or unreadable, and every
directory was read and every ``--path`` searched; its exit code is 1 otherwise.
``FleetReport.to_json`` is ``check --all --json``: a ``ledgers`` list whose entries carry
``path``, ``ok`` and the same fields as ``check --json``, and an ``unchecked`` list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from capsem_core.check.report import FAIL, OK, WARN, CheckReport, Value, json_default
from capsem_core.fleet.discover import (MISSING, NOT_A_LEDGER, NOT_SEARCHED, REFUSED, UNREADABLE, FleetLedger,
                                        Unchecked)

JSON_FORMAT = "capsem-ledger-check-all"
JSON_VERSION = 1
DAMAGED = "damaged"


@dataclass(slots=True)
class LedgerResult:
    """One ledger's outcome in a fleet run."""

    ledger: FleetLedger
    report: CheckReport | None
    error: str | None = None
    seconds: float = 0.0
    worker: str | None = None
    tasks: int = 1                      # 1, or 1 + its block ranges when its verify was split
    attempts: int = 1                   # task starts, retries included
    retried: list[str] = field(default_factory=list)   # why a task of this ledger ran again

    @property
    def ok(self) -> bool:
        """Checked, and not damaged (warnings are ok, as for ``check``)."""
        return self.report is not None and self.report.sound

    @property
    def verdict(self) -> str:
        if self.report is None:
            return UNREADABLE
        status = self.report.status
        return DAMAGED if status == FAIL else status

    def findings(self) -> int:
        """Findings of every check of the report (0 without one)."""
        if self.report is None:
            return 0
        return sum(c.findings_total for c in self.report.checks.values())

    def counts(self) -> dict[str, int | None]:
        """The figures a summary shows: bodies and blocks indexed, bodies verified (None when
        not verified), findings."""
        if self.report is None:
            return {"bodies": None, "blocks": None, "verified": None, "findings": None}
        archive = self.report.checks["body_archive"].counts
        verify = self.report.checks["verify_bodies"]
        return {"bodies": archive.get("bodies"), "blocks": archive.get("blocks"),
                "verified": verify.counts.get("verified") if verify.status != "skipped" else None,
                "findings": self.findings()}

    def to_json(self, strict: bool = False) -> dict[str, Value]:
        doc: dict[str, Value] = {
            "path": str(self.ledger.directory), "ok": self.ok, "verdict": self.verdict,
            "session_id": self.ledger.session_id, "name": self.ledger.name, "kind": self.ledger.kind,
            "bytes": self.ledger.size, "seconds": round(self.seconds, 6), "worker": self.worker,
            "tasks": self.tasks, "attempts": self.attempts, "retried": list(self.retried), "error": self.error,
        }
        if self.report is not None:
            doc.update(self.report.to_json(strict))
        else:
            doc.update(status=UNREADABLE, sound=False, exit_code=1)
        return doc


@dataclass(slots=True)
class FleetReport:
    """Every ledger of a run, in discovery order, the directories found or given and not
    checked, and notes on what discovery passed over."""

    results: list[LedgerResult]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runner: str = "local"              # "local" (a process per ledger) or the Dask scheduler's address
    jobs: int = 1                      # local processes, or the cluster's worker threads
    unchecked: list[Unchecked] = field(default_factory=list)

    def __iter__(self) -> Any:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def failed(self) -> list[LedgerResult]:
        """Ledgers that are damaged or could not be checked."""
        return [r for r in self.results if not r.ok]

    @property
    def not_looked_at(self) -> list[Unchecked]:
        """Directories that could not be read and ``--path`` values not searched: what keeps
        a run from saying its fleet is sound even when every ledger it read is."""
        return [u for u in self.unchecked if u.fails]

    @property
    def sound(self) -> bool:
        """At least one ledger checked, none damaged or unreadable, nothing left unread."""
        return bool(self.results) and not self.failed and not self.not_looked_at

    def totals(self) -> dict[str, int | float]:
        verdicts = [r.verdict for r in self.results]
        statuses = [u.status for u in self.unchecked]
        return {"ledgers": len(self.results), "ok": verdicts.count(OK), "warn": verdicts.count(WARN),
                "damaged": verdicts.count(DAMAGED), "unreadable": verdicts.count(UNREADABLE),
                "directories_unreadable": statuses.count(UNREADABLE),
                "directories_not_searched": statuses.count(NOT_SEARCHED),
                "paths_not_searched": statuses.count(MISSING) + statuses.count(REFUSED),
                "not_ledgers": statuses.count(NOT_A_LEDGER),
                "retried": sum(1 for r in self.results if r.retried),
                "bytes": sum(r.ledger.size for r in self.results), "seconds": round(self.seconds, 6)}

    def exit_code(self, strict: bool = False) -> int:
        if not self.sound:
            return 1
        return 1 if strict and any(r.verdict == WARN for r in self.results) else 0

    def to_json(self, strict: bool = False) -> dict[str, Value]:
        return {"format": JSON_FORMAT, "version": JSON_VERSION, "runner": self.runner, "jobs": self.jobs,
                "sound": self.sound, "exit_code": self.exit_code(strict), "totals": self.totals(),
                "notes": list(self.notes), "unchecked": [u.to_json() for u in self.unchecked],
                "ledgers": [r.to_json(strict) for r in self.results]}


def fleet_to_json(report: FleetReport, *, strict: bool = False) -> str:
    """``check --all --json``: one JSON object with the exact ledger values."""
    return json.dumps(report.to_json(strict), indent=2, default=json_default) + "\n"


__all__ = ["DAMAGED", "JSON_FORMAT", "JSON_VERSION", "UNREADABLE", "FleetReport", "LedgerResult", "fleet_to_json"]
