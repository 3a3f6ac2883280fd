"""What every kind of sample event shares: the writer, the one seeded random source, the fake
clock, the session's identities, the counts of what was written and when to stop.

Each event collaborator (security, network, processes, models, tools) holds the one
``Recorder`` of its session and writes through ``insert``; none of them keeps a clock or a
random source of its own, so the whole session stays one deterministic stream of draws.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from capsem_core._native._blake3 import hexdigest as b3hex
from capsem_core.sample.encoding import fit
from capsem_core.sample.pools import ALNUM, B58, shared_pools
from capsem_core.sample.profiles import Profile
from capsem_core.sample.providers import PROVIDERS, Provider
from capsem_core.sample.units import MIB
from capsem_core.writer import Body, LedgerWriter
from capsem_core.writer import ledger_timestamp as ledger_time

Progress = Callable[[int, int], None]


@dataclass
class Ctx:
    """Where an event sits on the identity graph."""

    trace_id: str | None
    turn_id: str | None
    prov: Provider | None = None
    model_call_id: int | None = None
    pid: int = 0


class Counters:
    """Rows per table, bodies and raw body bytes written so far."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.bodies = 0
        self.raw = 0


class Recorder:
    """The writer, the random source and the clock of one sample session."""

    def __init__(self, writer: LedgerWriter, *, seed: int, profile: Profile, start_time: float,
                 target_bodies: int | None, target_raw: int | None, progress: Progress | None) -> None:
        self.w = writer
        self.r = random.Random(seed)
        self.seed = seed
        self.p = profile
        self.pools = shared_pools()
        self.now = float(start_time)
        self.c = Counters()
        self.target_bodies = target_bodies
        self.target_raw = target_raw
        self.progress = progress
        self._progress_at = (0, 0)
        # The session's identities, drawn first and in this order: the order of draws is part of
        # what a seed means, so moving one changes every byte after it.
        r = self.r
        self.next_pid = 2000 + r.randrange(1000)
        self.audit_session = r.randint(1, 40)
        self.network_id = "net-" + self.hexid(12)
        self.user_id = "user_" + self.hexid(64)
        self.creds = {name: "credential:blake3:" + b3hex(f"sample key {name} {seed}".encode())
                      for name in PROVIDERS}

    # --- identifiers and time ---------------------------------------------------------------

    def hexid(self, n: int) -> str:
        return f"{self.r.getrandbits(4 * n):0{n}x}"

    def eid(self) -> str:
        return f"{self.r.getrandbits(48):012x}"

    def b58(self, n: int) -> str:
        return "".join(self.r.choices(B58, k=n))

    def alnum(self, n: int) -> str:
        return "".join(self.r.choices(ALNUM, k=n))

    def tick(self, lo: float, hi: float) -> None:
        self.now += self.r.uniform(lo, hi)

    def ts(self) -> str:
        return ledger_time(self.now)

    def ms(self) -> int:
        return int(self.now * 1000)

    def logu(self, lo: int, hi: int) -> int:
        """A log-uniform integer in [lo, hi]: sizes spread over orders of magnitude."""
        if hi <= lo:
            return lo
        return int(math.exp(self.r.uniform(math.log(max(lo, 1)), math.log(hi))))

    def new_pid(self) -> int:
        self.next_pid += self.r.randint(1, 9)
        return self.next_pid

    # --- writing ----------------------------------------------------------------------------

    def done(self) -> bool:
        """Whether the body or raw-byte target is reached."""
        c = self.c
        return ((self.target_bodies is not None and c.bodies >= self.target_bodies)
                or (self.target_raw is not None and c.raw >= self.target_raw))

    def body(self, direction: str, data: bytes | None, event_type: str, content_type: str | None = None,
             original_bytes: int | None = None) -> Body:
        return Body(direction, data or b"", event_type, content_type, original_bytes)

    def insert(self, table: str, row: Mapping[str, object], bodies: Sequence[Body] = ()) -> None:
        """One row and its non-empty bodies, counted (an empty body is not archived)."""
        kept = [b for b in bodies if b.data]
        c = self.c
        c.rows[table] = c.rows.get(table, 0) + 1
        for b in kept:
            c.bodies += 1
            c.raw += len(b.data)
        self.w.insert(table, row, kept)
        if self.progress is not None and (c.bodies - self._progress_at[0] >= 50_000
                                          or c.raw - self._progress_at[1] >= 128 * MIB):
            self._progress_at = (c.bodies, c.raw)
            self.progress(c.bodies, c.raw)

    def tiny(self, text: str) -> str:
        """``text`` fitted to 100-300 bytes: every tool body of the small mix."""
        return fit(text, 100, 300, self.pools.sentences[0])
