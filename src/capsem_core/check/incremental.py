"""Verifying less: ``--incremental``, ``--max-age`` and ``--subset`` over a ledger's blocks.

Work is decided per block (a block is the unit the kernel inflates). ``--subset`` picks the
blocks looked at (``subset.py``); the others are skipped. With ``--incremental`` each block
looked at is compared with the verification record (``record.py``):

* a block the record does not hold, or verified longer ago than ``--max-age``, is verified
  fully by the kernel, and so is a block whose extent grew (an open block that got more
  segments: a sync-flushed segment may refer back into earlier ones, so the whole block is
  read again) or whose index rows changed (rows added to it by deduplication, or edited);
* a block whose extent, raw length and index rows are as recorded is *proven unchanged* by
  one BLAKE3 of its on-disk bytes (nothing inflated), which must equal the recorded one;
* a recorded extent whose bytes no longer hash as recorded, or that shrank, is damage (a
  ``block_changed`` fault), never "new": it is verified fully too, so the kernel names the
  bodies at fault, and its old entry is kept, so the next run finds it again.

The record is rewritten only with blocks that came out clean; its writing waits until the
rest of the check is done (``PendingRecord.commit``), so a check that ends at damaged pages
records nothing. Without ``--incremental`` no record is read or written.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from capsem_core import cores
from capsem_core import verify as _verify
from capsem_core._native import _archive, _blake3
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.check import record as _record
from capsem_core.check.subset import Subset
from capsem_core.errors import LedgerError
from capsem_core.paths import archive_path_for

if TYPE_CHECKING:
    from capsem_core.snapshot import Snapshot

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d{1,9})([smhdw])")
# One index row as the record's digest of a block's rows sees it: its span and body hash.
_ROW = np.dtype([("body_offset", "<i8"), ("body_len", "<i8"), ("hash_ok", "u1"), ("digest", "u1", (32,))])
Mask = npt.NDArray[np.bool_]


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``7d``, ``12h``, ``30m``, ``90s``, ``2w`` or ``1d12h``;
    ValueError saying what is wrong."""
    s = text.strip().lower()
    parts = _DURATION.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"duration {text!r} is not a whole number of s, m, h, d or w (e.g. 7d, 12h, 30m, 1d12h)")
    return float(sum(int(n) * _UNITS[u] for n, u in parts))


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """How much of a ledger to verify. ``record_dir`` overrides where records live (default:
    ``record.record_dir()``); ``now`` the clock (seconds since the epoch), for tests."""

    incremental: bool = False
    subset: Subset | None = None
    max_age: float | None = None
    record_dir: Path | None = None
    now: float | None = None

    def __post_init__(self) -> None:
        if self.max_age is not None and not self.incremental:
            raise ValueError("max_age needs incremental: it says when a recorded block is verified again")
        if self.max_age is not None and (type(self.max_age) not in (int, float)):
            raise TypeError(f"max_age is seconds (a number) or a duration such as \"7d\", not "
                            f"{type(self.max_age).__name__}")
        if self.max_age is not None and not 0 <= self.max_age < math.inf:   # NaN fails both
            raise ValueError(f"max_age is a finite number of seconds, not negative: not {self.max_age!r}")
        if self.subset is not None and not isinstance(self.subset, Subset):
            raise TypeError(f"subset is \"n/t\", \"x%\" or a Subset, not {type(self.subset).__name__}")

    @property
    def whole(self) -> bool:
        """True when every block is verified fully (the plain --verify-bodies)."""
        return not self.incremental and self.subset is None


@dataclass(slots=True)
class Share:
    """A part of the ledger: blocks, the bodies they hold, and their on-disk bytes."""

    blocks: int = 0
    bodies: int = 0
    bytes: int = 0

    @classmethod
    def of(cls, mask: Mask, bodies: npt.NDArray[np.int64], disk_len: npt.NDArray[np.int64]) -> Share:
        return cls(int(np.count_nonzero(mask)), int(bodies[mask].sum()), int(disk_len[mask].sum()))

    def to_json(self) -> dict[str, int]:
        return {"blocks": self.blocks, "bodies": self.bodies, "bytes": self.bytes}


@dataclass(slots=True)
class Coverage:
    """What one verify covered: read back fully, proven unchanged, skipped; and the record."""

    incremental: bool = False
    subset: Subset | None = None
    max_age: float | None = None
    verified: Share = field(default_factory=Share)
    unchanged: Share = field(default_factory=Share)
    skipped: Share = field(default_factory=Share)
    record_path: Path | None = None
    # "not used" (no --incremental), "none yet", "used", "ignored", then after commit
    # "written" or "not written".
    record: str = "not used"
    warning: str | None = None
    oldest_unchanged: int | None = None   # verified_at of the oldest block proven unchanged

    def to_json(self) -> dict[str, Any]:
        return {"incremental": self.incremental, "subset": None if self.subset is None else self.subset.to_json(),
                "max_age_s": self.max_age, "verified": self.verified.to_json(),
                "unchanged": self.unchanged.to_json(), "skipped": self.skipped.to_json(),
                "record": {"path": None if self.record_path is None else str(self.record_path),
                           "status": self.record, "warning": self.warning},
                "oldest_unchanged_verified_at": None if self.oldest_unchanged is None
                else timestamp(self.oldest_unchanged)}


@dataclass(slots=True)
class PendingRecord:
    """A record to write once the whole check is known to be done (see the module docstring)."""

    path: Path
    identity: _record.Identity
    entries: npt.NDArray[np.void]
    coverage: Coverage

    def commit(self) -> None:
        """Write it; a record that cannot be written is said so in the coverage, not raised
        (the verify's result does not depend on it)."""
        try:
            _record.save(self.path, self.identity, self.entries)
        except (OSError, LedgerError) as exc:
            self.coverage.record = "not written"
            why = exc.detail if isinstance(exc, LedgerError) else exc.strerror or exc
            said = f"verification record {self.path} not written: {why}"
            self.coverage.warning = said if self.coverage.warning is None else f"{self.coverage.warning}; {said}"
            return
        self.coverage.record = "written"


@dataclass(slots=True)
class Outcome:
    """A partial verify's result: the kernel's faults, the recorded blocks found changed
    (``block_changed`` faults with no row), the coverage, and the record to commit."""

    faults: list[_verify.BodyFault]
    coverage: Coverage
    pending: PendingRecord | None = None
    read_back: int = 0   # bodies handed to the kernel

    @property
    def verified(self) -> int:
        """Bodies read back that matched their hashes."""
        return self.read_back - sum(f.row_id is not None for f in self.faults)


class VerifyResult(tuple[int, list[_verify.BodyFault]]):
    """``Ledger.verify``'s result: unpacks as ``(verified_count, faults)``, as it always has;
    ``coverage`` says what was read back fully, proven unchanged and skipped (None for a
    whole verify)."""

    coverage: Coverage | None

    def __new__(cls, verified: int, faults: list[_verify.BodyFault],
                coverage: Coverage | None = None) -> VerifyResult:
        self = super().__new__(cls, (verified, faults))
        self.coverage = coverage
        return self

    @property
    def verified(self) -> int:
        return self[0]

    @property
    def faults(self) -> list[_verify.BodyFault]:
        return self[1]


def timestamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")


def rows_digests(index: BodyIndex, starts: npt.NDArray[np.int64],
                 counts: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """(blocks, 32): per block, BLAKE3 of the spans and body hashes of the index rows naming
    it (rows in archive order, the bodies of a block contiguous)."""
    rows = np.empty(len(index), dtype=_ROW)
    rows["body_offset"] = index.body_offset
    rows["body_len"] = index.body_len
    rows["hash_ok"] = index.hash_ok
    rows["digest"] = np.asarray(index.digest, dtype=np.uint8).reshape(-1, 32)
    return _blake3.hash_many(rows.view(np.uint8).data, starts * _ROW.itemsize, counts * _ROW.itemsize)


def verify_part(snapshot: Snapshot, options: VerifyOptions, *, threads: int = 0,
                progress: Callable[[int, int], None] | None = None,
                read: _archive.VerifyOutcome | None = None) -> Outcome:
    """Verify the part of the snapshot's ledger ``options`` asks for (every block, by default)
    on its archive reader, its index's bodies naming recorded blocks (the archive check found
    them in agreement; ``Ledger.verify`` may hand over one that does not, and the kernel
    reports it). ``progress`` is told what the kernel will read (its ``begin``), then how far
    it is. ``read``: the whole snapshot already read back (``verify.read_back``), for a
    ``whole`` options only."""
    index = snapshot.index()
    reader = snapshot.archive()
    blocks = index.blocks
    k_off, k_raw, k_disk = blocks.block_offset, blocks.raw_len, blocks.disk_len
    n = len(k_off)
    b_blk = index.block_offset
    starts = np.searchsorted(b_blk, k_off, "left")
    counts = np.searchsorted(b_blk, k_off, "right") - starts
    now = int(options.now if options.now is not None else time.time())
    cov = Coverage(incremental=options.incremental, subset=options.subset, max_age=options.max_age)
    db_path = snapshot.db_path

    looked = options.subset.select(n) if options.subset is not None else np.ones(n, dtype=bool)
    cov.skipped = Share.of(~looked, counts, k_disk)
    full = looked.copy()
    proven = np.zeros(n, dtype=bool)
    changed: list[_verify.BodyFault] = []
    old = np.zeros(n, dtype=_record.ENTRY)
    has = changed_mask = np.zeros(n, dtype=bool)
    dropped = False
    rows = None
    identity = None
    path = None
    if options.incremental:
        path = _record.record_path(archive_path_for(db_path), options.record_dir)
        cov.record_path = path
        rec, cov.warning = _record.load(path, lambda plen: _record.identity_of(reader, db_path, plen), n)
        if cov.warning is not None:
            cov.warning = f"verification record {path} ignored: it {cov.warning}; every block is verified fully"
        cov.record = "used" if rec is not None else ("ignored" if cov.warning else "none yet")
        identity = _record.identity_of(reader, db_path)
        rows = rows_digests(index, starts, counts)
        has = np.zeros(n, dtype=bool)
        if rec is not None and len(rec.entries):
            e = rec.entries
            pos = np.minimum(np.searchsorted(k_off, e["block_offset"]), max(n - 1, 0))
            match = (k_off[pos] == e["block_offset"]) if n else np.zeros(len(e), dtype=bool)
            old[pos[match]] = e[match]
            has[pos[match]] = True
        dropped = rec is not None and len(rec.entries) != int(np.count_nonzero(has))
        # The extent each looked-at block was verified with, and what it is now.
        was_disk, was_raw = old["disk_len"], old["raw_len"]
        hashable = has & looked & (was_disk <= k_disk) & (was_raw <= k_raw) & ((was_disk < k_disk) | (was_raw == k_raw))
        shrank = has & looked & ~hashable
        grown = hashable & (was_disk < k_disk)
        fresh = has.copy()
        if options.max_age is not None:
            # A time after now (the clock was set back) is not trusted to be recent.
            fresh &= (old["verified_at"] <= now) & (now - old["verified_at"] <= options.max_age)
        same_rows = has & (old["bodies"] == counts) & np.all(old["rows"] == rows, axis=1)
        candidate = hashable & ~grown & fresh & same_rows
        # One pass: every looked-at block's extent as it is now, plus the verified prefix
        # of each grown block.
        look = np.flatnonzero(looked)
        extra = np.flatnonzero(grown)
        prints = _archive.hash_extents(reader, np.concatenate([k_off[look], k_off[extra]]),
                                       np.concatenate([k_disk[look], was_disk[extra]]),
                                       threads=cores.threads(threads))
        now_hash = np.zeros((n, 32), dtype=np.uint8)
        now_segs = np.zeros((n, 32), dtype=np.uint8)
        now_status = np.full(n, _archive.EXTENT_PAST_END, dtype=np.uint8)
        now_hash[look], now_segs[look], now_status[look] = (prints.disk_hash[:len(look)],
                                                            prints.segments[:len(look)], prints.status[:len(look)])
        was_hash, was_segs, was_status = now_hash.copy(), now_segs.copy(), now_status.copy()
        was_hash[extra], was_segs[extra] = prints.disk_hash[len(look):], prints.segments[len(look):]
        was_status[extra] = prints.status[len(look):]
        hashed = (was_status == _archive.EXTENT_HASHED) | (was_status == _archive.EXTENT_UNCHAINED)
        differs = hashable & (~hashed | np.any(was_hash != old["disk_hash"], axis=1))
        proven = candidate & ~differs
        full = looked & ~proven
        for i in np.flatnonzero(differs | shrank).tolist():
            changed.append(_changed_fault(i, k_off, k_raw, k_disk, old, bool(shrank[i]), int(was_status[i]),
                                          bool(np.array_equal(was_segs[i], old["segments"][i]))))
        changed_mask = differs | shrank
        if proven.any():
            cov.oldest_unchanged = int(old["verified_at"][proven].min())
    cov.unchanged = Share.of(proven, counts, k_disk)
    cov.verified = Share.of(full, counts, k_disk)

    part = _verify.whole(snapshot) if full.all() else _verify.Part(*index.in_blocks(full))
    verified = _verify.run(snapshot, part, threads=threads, progress=progress, read=read)
    failed = _failed_blocks(part.rows, verified.status, k_off)
    pending = None
    if options.incremental and identity is not None and path is not None and rows is not None:
        # Only blocks that came out clean get new entries; every other recorded block keeps
        # its old one (a damaged block is then found again next time, never recorded).
        clean = full & ~failed & ~changed_mask & (now_status == _archive.EXTENT_HASHED)
        new = old.copy()
        for name, values in (("block_offset", k_off), ("disk_len", k_disk), ("raw_len", k_raw),
                             ("bodies", counts), ("disk_hash", now_hash), ("segments", now_segs), ("rows", rows)):
            new[name][clean] = values[clean]
        new["verified_at"][clean] = now
        if cov.record != "used" or clean.any() or dropped:
            pending = PendingRecord(path, identity, new[clean | has], cov)
    return Outcome(changed + verified.faults, cov, pending, verified.read_back)


def _failed_blocks(rows: BodyIndex, status: npt.NDArray[np.uint8], k_off: npt.NDArray[np.int64]) -> Mask:
    """The blocks (a mask over ``k_off``) holding a row the kernel did not verify."""
    failed = np.zeros(len(k_off), dtype=bool)
    bad = rows.block_offset[np.flatnonzero(status)]
    slot = np.minimum(np.searchsorted(k_off, bad), max(len(k_off) - 1, 0))
    if len(k_off):
        failed[slot[k_off[slot] == bad]] = True
    return failed


def _changed_fault(i: int, k_off: Any, k_raw: Any, k_disk: Any, old: Any, shrank: bool, status: int,
                   same_segments: bool) -> _verify.BodyFault:
    off = int(k_off[i])
    when = timestamp(int(old["verified_at"][i]))
    was_disk, was_raw = int(old["disk_len"][i]), int(old["raw_len"][i])
    if shrank:
        text = (f"block at offset {off} records {int(k_disk[i])} bytes ({int(k_raw[i])} raw) but {was_disk} "
                f"({was_raw} raw) were verified at {when}: a block's extent and raw bytes only grow together")
    elif status == _archive.EXTENT_SHRANK:
        text = f"block at offset {off}: the file shrank while it was read"
    elif status == _archive.EXTENT_PAST_END:
        text = f"block at offset {off} verified at {when} now lies past the end of session.bodies"
    else:
        which = "its" if was_disk == int(k_disk[i]) else f"the first {was_disk} of its"
        text = (f"block at offset {off} changed since it was verified at {when}: {which} on-disk bytes no "
                f"longer hash as recorded")
        text += (" (its segment hashes are as recorded: compressed bytes changed)" if same_segments
                 else " (its segment headers changed)")
    return _verify.BodyFault(None, None, None, None, off, None, None, None, "block_changed", text)


__all__ = ["Coverage", "Outcome", "PendingRecord", "Share", "VerifyOptions", "VerifyResult", "parse_duration", "rows_digests",
           "timestamp", "verify_part"]
