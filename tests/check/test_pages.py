"""The page check gives PRAGMA quick_check's verdict: differentially, on hundreds of damaged
copies of a small sample session.db, and on the damage only a whole-file check can see.

The sample is a real ledger (``write_sample_ledger``) rewritten with 1 KiB pages so a small
file has many pages, some rows made long enough to spill into overflow chains and some rows
deleted so the freelist holds trunk and leaf pages. Each damaged copy is checked twice: by
``PRAGMA quick_check`` itself on a plain connection, and by ``check_pages`` (quick_check per
table on worker connections plus the native page map). Every copy quick_check calls damaged
must be reported damaged, and every copy it passes must pass.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from capsem_core.check import check_ledger
from capsem_core.check.run import check_pages
from capsem_core.pages.check import PER_TABLE, quick_check_lines
from capsem_core.errors import LedgerError
from capsem_core.sample import write_sample_ledger

PAGE_SIZE = 1024
CASES = 330


@dataclass(frozen=True)
class Sample:
    data: bytes
    page_size: int
    btree: dict[int, str]     # page -> "leaf" / "internal" (dbstat's words)
    tree_of: dict[int, str]   # page -> the table or index it belongs to
    overflow: list[int]
    freelist: list[int]       # trunk pages first, then leaves
    interior: list[int]


def _u32(data: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from(">I", data, at)[0])


def _freelist(data: bytes, page_size: int) -> tuple[list[int], list[int]]:
    trunks, leaves = [], []
    trunk = _u32(data, 32)
    while trunk:
        trunks.append(trunk)
        base = (trunk - 1) * page_size
        n = _u32(data, base + 4)
        leaves += [_u32(data, base + 8 + 4 * i) for i in range(n)]
        trunk = _u32(data, base)
    return trunks, leaves


def _write_sample(directory: Path, auto_vacuum: str) -> Sample:
    write_sample_ledger(directory, seed=5, bodies=120)
    db = directory / "session.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    conn.execute(f"PRAGMA auto_vacuum = {auto_vacuum}")
    conn.execute("VACUUM")
    # Long values spill into overflow chains; deleting some of them and a run of rows puts
    # overflow and leaf pages on the freelist.
    conn.execute("UPDATE net_events SET path = path || printf('%.*c', 2500 + id * 97, 'p') "
                 "WHERE id IN (SELECT id FROM net_events ORDER BY id LIMIT 12)")
    conn.execute("DELETE FROM net_events WHERE id IN (SELECT id FROM net_events ORDER BY id LIMIT 4)")
    conn.execute("DELETE FROM event_body_blobs WHERE id IN (SELECT id FROM event_body_blobs ORDER BY id LIMIT 40)")
    conn.execute("PRAGMA journal_mode = WAL")
    stat = conn.execute("SELECT pageno, pagetype, name FROM dbstat").fetchall()
    assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    conn.close()
    data = db.read_bytes()
    trunks, leaves = _freelist(data, PAGE_SIZE)
    btree = {p: kind for p, kind, _ in stat if kind in ("leaf", "internal")}
    sample = Sample(data, PAGE_SIZE, btree, {p: name for p, _, name in stat},
                    sorted(p for p, kind, _ in stat if kind == "overflow"), trunks + leaves,
                    sorted(p for p, kind in btree.items() if kind == "internal"))
    assert len(sample.overflow) >= 10 and trunks and len(leaves) >= 5 and len(sample.interior) >= 5
    return sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    return _write_sample(tmp_path_factory.mktemp("pages") / "sess", "NONE")


@pytest.fixture(scope="module")
def vacuum_sample(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    """The same ledger with incremental auto-vacuum: pointer-map pages, a freelist kept."""
    sample = _write_sample(tmp_path_factory.mktemp("pages-av") / "sess", "INCREMENTAL")
    assert _u32(sample.data, 52) != 0
    return sample


# --- damage -------------------------------------------------------------------------------------

def _header_at(page: int) -> int:
    return 100 if page == 1 else 0


def _put32(data: bytearray, at: int, value: int) -> None:
    struct.pack_into(">I", data, at, value & 0xFFFFFFFF)


def _a_page_number(rng: random.Random, s: Sample, npages: int) -> int:
    """A page number a damaged pointer might hold: in use elsewhere, free, out of range, 0."""
    return rng.choice([rng.randint(1, npages), rng.choice(sorted(s.btree)), rng.choice(s.freelist),
                       rng.choice(s.overflow), npages + rng.randint(1, 50), 0, 0xFFFFFFFF])


def _child_slots(data: bytes, page_size: int, page: int) -> list[int]:
    """Byte offsets of an interior page's child pointers (its cells' and the right-most)."""
    base, hdr = (page - 1) * page_size, _header_at(page)
    ncell = struct.unpack_from(">H", data, base + hdr + 3)[0]
    slots = [base + hdr + 8]
    for i in range(min(ncell, (page_size - 12) // 2)):
        pc = struct.unpack_from(">H", data, base + hdr + 12 + 2 * i)[0]
        if pc + 4 <= page_size:
            slots.append(base + pc)
    return slots


def damage(rng: random.Random, s: Sample) -> tuple[str, bytes]:
    """One damaged copy of the sample: what was done, and the bytes."""
    data = bytearray(s.data)
    ps, npages = s.page_size, len(s.data) // s.page_size
    kind = rng.choice(["random_bytes", "random_bytes", "page_header", "cell_pointer", "child_pointer",
                       "twice", "freelist", "overflow", "truncate", "header", "zero_page", "swap_pages"])
    if kind == "random_bytes":
        page = rng.randint(1, npages)
        at = (page - 1) * ps + rng.randrange(ps)
        for i in range(rng.randint(1, 8)):
            if at + i < len(data):
                data[at + i] = rng.randrange(256)
    elif kind == "page_header":
        page = rng.choice(sorted(s.btree))
        data[(page - 1) * ps + _header_at(page) + rng.randrange(12)] = rng.randrange(256)
    elif kind == "cell_pointer":
        page = rng.choice(sorted(s.btree))
        base, hdr = (page - 1) * ps, _header_at(page)
        ncell = struct.unpack_from(">H", data, base + hdr + 3)[0]
        if ncell:
            ptrs = base + hdr + (12 if s.btree[page] == "internal" else 8)
            i = rng.randrange(ncell)
            value = rng.choice([rng.randrange(65536), struct.unpack_from(">H", data, ptrs + 2 * rng.randrange(ncell))[0],
                                struct.unpack_from(">H", data, ptrs + 2 * i)[0] + rng.choice([-1, 1, 4])])
            struct.pack_into(">H", data, ptrs + 2 * i, value & 0xFFFF)
    elif kind == "child_pointer":
        slot = rng.choice(_child_slots(data, ps, rng.choice(s.interior)))
        _put32(data, slot, _a_page_number(rng, s, npages))
    elif kind == "twice":
        # A page referenced twice: a child pointer, a freelist leaf or an overflow link set
        # to a page something else already uses.
        used = rng.choice([rng.choice(sorted(s.btree)), rng.choice(s.overflow), rng.choice(s.freelist)])
        where = rng.choice(["child", "leaf", "overflow"])
        trunk = s.freelist[0]
        leaves = _u32(data, (trunk - 1) * ps + 4)
        if where == "child":
            _put32(data, rng.choice(_child_slots(data, ps, rng.choice(s.interior))), used)
        elif where == "leaf" and leaves:
            _put32(data, (trunk - 1) * ps + 8 + 4 * rng.randrange(leaves), used)
        else:
            _put32(data, (rng.choice(s.overflow) - 1) * ps, used)
    elif kind == "freelist":
        trunk = rng.choice(s.freelist[:1])
        base = (trunk - 1) * ps
        leaves = _u32(data, base + 4)
        what = rng.choice(["next", "count", "leaf", "header_count", "header_trunk"])
        if what == "next":
            _put32(data, base, _a_page_number(rng, s, npages))
        elif what == "count":
            _put32(data, base + 4, rng.choice([leaves + 1, max(leaves - 1, 0), rng.randrange(1 << 16), 0xFFFFFFFF]))
        elif what == "leaf" and leaves:
            _put32(data, base + 8 + 4 * rng.randrange(leaves), _a_page_number(rng, s, npages))
        elif what == "header_count":
            _put32(data, 36, _u32(data, 36) + rng.choice([-2, -1, 1, 3]))
        else:
            _put32(data, 32, _a_page_number(rng, s, npages))
    elif kind == "overflow":
        page = rng.choice(s.overflow)
        _put32(data, (page - 1) * ps, _a_page_number(rng, s, npages))
    elif kind == "truncate":
        cut = rng.choice([rng.randint(1, npages - 1) * ps, rng.randrange(100, len(data)), len(data) - rng.randint(1, ps)])
        del data[cut:]
        if rng.random() < 0.3:
            _put32(data, 28, npages)   # the header still counts every page
    elif kind == "header":
        at = rng.choice([16, 17, 18, 19, 20, 21, 28, 29, 30, 31, 32, 35, 36, 39, 40, 44, 52, 56, 64, 92, 95])
        data[at] = rng.randrange(256)
    elif kind == "zero_page":
        page = rng.randint(2, npages)
        data[(page - 1) * ps:page * ps] = bytes(ps)
    else:
        a, b = rng.sample(range(2, npages + 1), 2)
        pa, pb = data[(a - 1) * ps:a * ps], data[(b - 1) * ps:b * ps]
        data[(a - 1) * ps:a * ps], data[(b - 1) * ps:b * ps] = pb, pa
    return kind, bytes(data)


def quick_check_verdict(db: Path) -> str:
    """SQLite's own verdict: "sound", "damaged", or "not_a_database" (SQLite refuses it)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        lines = quick_check_lines(conn)
    finally:
        conn.close()
    if lines == ["ok"]:
        return "sound"
    return "not_a_database" if lines == ["file is not a database"] else "damaged"


def page_check_verdict(db: Path, threads: int) -> tuple[str, str | None]:
    try:
        result = check_pages(db, threads=threads)
    except LedgerError as exc:
        # The one refusal allowed: a file that is not SQLite at all (check's own one-line error).
        return ("not_a_database" if "not a SQLite database" in str(exc) else f"error: {exc}"), None
    return ("damaged" if result.counts["damaged"] else "sound"), result.counts.get("method")


def _fresh(directory: Path, data: bytes) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    db = directory / "session.db"
    db.write_bytes(data)
    return db


# --- the tests -------------------------------------------------------------------------------------

def test_the_sample_passes_both_and_the_page_map_sees_its_freelist_and_overflow(sample: Sample, tmp_path: Path) -> None:
    db = _fresh(tmp_path / "s", sample.data)
    result = check_pages(db, threads=2)
    assert result.counts["damaged"] is False and result.counts["method"] == PER_TABLE
    assert result.counts["pages_walked"] == len(sample.data) // PAGE_SIZE
    assert result.counts["tables_checked"] > 10


def _differential(sample: Sample, tmp_path: Path, seed: int, cases: int) -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    seen: dict[str, dict[str, int]] = {}
    wrong: list[str] = []
    for case in range(cases):
        kind, data = damage(rng, sample)
        db = _fresh(tmp_path / "case", data)
        want = quick_check_verdict(db)
        got, method = page_check_verdict(db, threads=1 + case % 2)
        seen.setdefault(kind, {}).setdefault(want, 0)
        seen[kind][want] += 1
        if got != want:
            keep = tmp_path / f"wrong-{case}"
            shutil.copytree(db.parent, keep)
            wrong.append(f"case {case} ({kind}): quick_check {want}, page check {got} [{method}] {keep}")
        elif want == "sound":
            assert method == PER_TABLE, f"case {case} ({kind}) was not checked per table"
    assert wrong == [], "\n".join(wrong)
    return seen


def test_every_damaged_copy_quick_check_rejects_is_rejected_and_every_sound_one_passes(
        sample: Sample, tmp_path: Path) -> None:
    seen = _differential(sample, tmp_path, 20261130, CASES)
    # The generator is only a test if it makes both kinds of copies, of every sort.
    verdicts = {v: sum(c.get(v, 0) for c in seen.values()) for v in ("sound", "damaged")}
    assert verdicts["damaged"] >= 120 and verdicts["sound"] >= 30, seen
    for kind in ("child_pointer", "twice", "freelist", "overflow", "truncate", "cell_pointer", "page_header"):
        assert seen[kind].get("damaged", 0) >= 3, (kind, seen[kind])


def test_an_auto_vacuum_ledger_gets_quick_checks_verdict_too(vacuum_sample: Sample, tmp_path: Path) -> None:
    db = _fresh(tmp_path / "s", vacuum_sample.data)
    assert check_pages(db, threads=2).counts["damaged"] is False
    seen = _differential(vacuum_sample, tmp_path, 7, 120)
    assert sum(c.get("damaged", 0) for c in seen.values()) >= 40


def test_a_root_pages_pointer_map_entry_is_checked_though_no_table_check_reads_it(
        vacuum_sample: Sample, tmp_path: Path) -> None:
    data = bytearray(vacuum_sample.data)
    # Page 2 is the first pointer-map page: pages 3 to 2 + PAGE_SIZE // 5, page p's entry at 5 * (p - 3).
    ptrmap = (2 - 1) * PAGE_SIZE
    roots = sorted(p for p in vacuum_sample.btree if 2 < p <= 2 + PAGE_SIZE // 5 and data[ptrmap + 5 * (p - 3)] == 1)
    data[ptrmap + 5 * (roots[-1] - 3)] = 5   # a root now claims to be a b-tree child page
    db = _fresh(tmp_path / "ptrmap", bytes(data))
    assert _per_table_only(db) == []
    assert quick_check_verdict(db) == "damaged"
    messages = [f.message for f in check_pages(db, threads=1).findings]
    assert any(m.startswith(f"Bad ptr map entry key={roots[-1]} expected=(1,0)") for m in messages), messages


def _per_table_only(db: Path) -> list[str]:
    """What quick_check of every table alone says (no whole-file checks)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = ["sqlite_schema"] + [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        return [line for t in tables for line in quick_check_lines(conn, t) if line != "ok"]
    finally:
        conn.close()


def test_a_page_used_by_a_table_and_the_freelist_is_damage_though_every_table_passes(
        sample: Sample, tmp_path: Path) -> None:
    data = bytearray(sample.data)
    trunk = sample.freelist[0]
    in_use = next(p for p, kind in sample.btree.items() if kind == "leaf" and sample.tree_of[p] == "net_events")
    _put32(data, (trunk - 1) * PAGE_SIZE + 8, in_use)   # the freelist now lists a page of net_events
    db = _fresh(tmp_path / "twice", bytes(data))
    assert _per_table_only(db) == []
    assert quick_check_verdict(db) == "damaged"
    result = check_pages(db, threads=2)
    assert result.counts["damaged"] is True
    messages = [f.message for f in result.findings]
    assert any(m.startswith(f"2nd reference to page {in_use}") and "table net_events" in m for m in messages) \
        or any(f"Page {sample.freelist[1]}: never used" in m for m in messages), messages


def test_pages_no_one_uses_are_damage_though_every_table_passes(sample: Sample, tmp_path: Path) -> None:
    data = bytearray(sample.data)
    _put32(data, 32, 0)   # the header forgets the freelist: its pages are used by nothing
    _put32(data, 36, 0)
    db = _fresh(tmp_path / "orphans", bytes(data))
    assert _per_table_only(db) == []
    assert quick_check_verdict(db) == "damaged"
    result = check_pages(db, threads=1)
    messages = {f.message for f in result.findings}
    assert {f"Page {p}: never used" for p in sample.freelist} <= messages


def test_a_page_shared_by_two_tables_is_damage_though_each_table_passes(sample: Sample, tmp_path: Path) -> None:
    # An interior page of one tree points at a leaf of another table: both trees still
    # check clean on their own, but one page is used twice and the orphaned leaf by no one.
    data = bytearray(sample.data)
    for parent in sample.interior:
        slot = _child_slots(sample.data, PAGE_SIZE, parent)[0]
        old = _u32(data, slot)
        other = [p for p, kind in sample.btree.items() if kind == "leaf" and sample.tree_of[p] == sample.tree_of[old]
                 and p != old]
        if other:
            _put32(data, slot, other[0])
            break
    db = _fresh(tmp_path / "shared", bytes(data))
    want = quick_check_verdict(db)
    assert want == "damaged"
    assert check_pages(db, threads=2).counts["damaged"] is True


def test_check_reports_a_truncated_session_db_as_page_damage_not_an_error(sample: Sample, tmp_path: Path) -> None:
    db = _fresh(tmp_path / "cut", sample.data[:len(sample.data) // 2])
    assert quick_check_verdict(db) == "damaged"
    report = check_ledger(db)
    assert not report.sound and report.checks["pages"].counts["damaged"] is True
    assert report.checks["tables"].status == "skipped"


def test_a_non_empty_wal_falls_back_to_one_whole_file_quick_check(sample: Sample, tmp_path: Path) -> None:
    db = _fresh(tmp_path / "wal", sample.data)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE net_events SET domain = domain || '.x' WHERE id = (SELECT MIN(id) FROM net_events)")
    try:
        assert Path(f"{db}-wal").stat().st_size > 0
        result = check_pages(db, threads=2)
        assert result.counts["method"] == "whole_file" and result.counts["damaged"] is False
        assert result.counts["threads"] == 1
    finally:
        writer.close()


def test_a_ctrl_c_while_the_workers_start_is_that_interrupt_not_another_error(
        sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _fresh(tmp_path / "interrupted", sample.data)
    real = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("capsem-check-"):
            raise KeyboardInterrupt   # as SIGINT arriving just before the thread starts
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        check_pages(db, threads=2)
