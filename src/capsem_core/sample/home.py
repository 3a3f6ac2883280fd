"""``write_sample_home``: a whole sample ``CAPSEM_HOME``, and ``HomeSummary``, what it laid out.

A home holds ephemeral ledgers in ``run/sessions/<id>/``, named persistent VMs in
``run/persistent/<name>/``, and ``sessions/main.db`` with a row per session in every status
(running, stopped, crashed), rolled up where Capsem rolls up, and some sessions vacuumed (their
ledger removed, their main.db row kept). The session mix of a
home (which kinds, in which order, under which names) is fixed here.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from capsem_core.errors import LedgerError
from capsem_core.sessions.maindb import create_main_db, mark_session
from capsem_core.sessions.totals import rollup
from capsem_core.paths import SESSION_DB
from capsem_core.sample.ledger import DEFAULT_START_TIME, SampleSummary, write_sample_ledger
from capsem_core.sample.profiles import Mix
from capsem_core.sessions import home_layout, register_session
from capsem_core.writer import ledger_timestamp as ledger_time

HomeCategory = Literal["stopped", "running", "crashed", "vacuumed", "persistent"]

# The first five cover every kind of session; later ones repeat the common kinds.
_HOME_FIRST: tuple[HomeCategory, ...] = ("stopped", "persistent", "vacuumed", "running", "crashed")
_HOME_CYCLE: tuple[HomeCategory, ...] = ("stopped", "vacuumed", "stopped", "persistent", "crashed", "stopped", "running")
_VM_NAMES: tuple[str, ...] = ("co-work1", "code-vm1", "research-2", "data-lab", "review-box", "scratch-3")


@dataclass(frozen=True)
class HomeSession:
    """One session of a sample home, as main.db and the run directory describe it."""

    id: str
    name: str | None            # display name of a persistent VM; None for an ephemeral session
    kind: str                   # "ephemeral" | "persistent"
    category: HomeCategory
    status: str                 # main.db status: running | stopped | crashed
    ledger_dir: Path | None     # None once vacuumed (stats only in main.db)
    created_at: str
    stopped_at: str | None
    rolled_up: bool
    sample: SampleSummary


@dataclass(frozen=True)
class HomeSummary:
    """What ``write_sample_home`` laid out."""

    home: Path
    main_db: Path
    sessions: tuple[HomeSession, ...]
    seconds: float

    def describe(self) -> str:
        lines = [f"{self.home}: sample CAPSEM_HOME with {len(self.sessions)} sessions "
                 f"({self.seconds:.2f} s), main.db at {self.main_db}"]
        for s in self.sessions:
            where = str(s.ledger_dir.relative_to(self.home)) if s.ledger_dir else "(vacuumed: main.db only)"
            lines.append(f"  {s.id}  {s.status:8s} {s.name or '-':12s} {s.sample.bodies:6d} bodies  {where}")
        return "\n".join(lines)


def write_sample_home(home: os.PathLike[str] | str, *, seed: int = 0, sessions: int = 12,
                      mix: Mix = "realistic", bodies: int | None = None, codec: str = "deflate",
                      start_time: float = DEFAULT_START_TIME) -> HomeSummary:
    """Lay out a whole Capsem home at ``home``: ledgers under ``run/sessions/<id>/`` (ephemeral)
    and ``run/persistent/<name>/`` (named VMs, display name != id), ``sessions/main.db`` with
    one row per session in every status, rolled up for the sessions that stopped cleanly,
    and some vacuumed sessions whose ledger is gone. Small by default: a few hundred bodies per
    session (``bodies`` overrides)."""
    if sessions <= 0:
        raise ValueError("a sample home holds at least one session")
    layout = home_layout(Path(home))
    if os.path.lexists(layout.main_db):
        raise LedgerError("a main.db already exists here; refusing to overwrite it with a sample home",
                          layout.main_db)
    began = time.perf_counter()
    r = random.Random(f"sample home {seed}")
    create_main_db(layout.main_db)
    out: list[HomeSession] = []
    names = list(_VM_NAMES)
    persistent_seen = 0
    t = start_time - sessions * 5 * 3600.0
    for i in range(sessions):
        category = _HOME_FIRST[i] if i < len(_HOME_FIRST) else _HOME_CYCLE[(i - len(_HOME_FIRST)) % len(_HOME_CYCLE)]
        session_id = str(_uuid4(r))
        name = None
        if category == "persistent":
            name = names[persistent_seen % len(names)]
            if persistent_seen >= len(names):
                name += f"-{persistent_seen // len(names) + 1}"
            persistent_seen += 1
            ledger_dir = layout.persistent_root / name
        else:
            ledger_dir = layout.sessions_root / session_id
        created = t + r.uniform(0, 3600)
        created_at = ledger_time(created)
        register_session(layout.main_db, session_id, name=name, mode=r.choice(("cli", "cli", "gui")),
                         status="running", created_at=created_at)
        target = bodies if bodies is not None else r.randint(120, 480)
        summary = write_sample_ledger(ledger_dir, seed=seed * 1_000_003 + i, mix=mix, bodies=target,
                                      codec=codec, start_time=created)
        ended_at = summary.ended_at
        status, stopped_at, rolled = "running", None, False
        if category in ("stopped", "vacuumed") or (category == "persistent" and persistent_seen % 2 == 0):
            status, stopped_at = "stopped", ended_at
            mark_session(layout.main_db, session_id, status, ended_at)
            rollup(layout.main_db, session_id, ledger_dir / SESSION_DB)
            rolled = True
        elif category == "crashed":
            # A crashed VM never ran its stop path, so nothing rolled its totals up.
            status, stopped_at = "crashed", ended_at
            mark_session(layout.main_db, session_id, status, ended_at)
        kept: Path | None = ledger_dir
        if category == "vacuumed":
            shutil.rmtree(ledger_dir)
            kept = None
        out.append(HomeSession(session_id, name, "persistent" if name else "ephemeral", category, status, kept,
                               created_at, stopped_at, rolled, summary))
        t += 5 * 3600.0
    return HomeSummary(Path(home), layout.main_db, tuple(out), time.perf_counter() - began)


def _uuid4(r: random.Random) -> str:
    """A version-4 UUID drawn from ``r``, so session ids follow the seed."""
    return str(uuid.UUID(int=r.getrandbits(128), version=4))
