"""Behaviour of the archive appender (``BodyArchiveWriter``): blocks and segments as Capsem
writes them, torn files, and what every cut at a flush answers.

Every archive written here is read back with ``oracles/archive_reader.py``, an independent
pure-Python reader, never with the writer's own code.
"""

from __future__ import annotations

import os
import random
import stat
import zlib

import pytest
from tests.writer.helpers import CODECS, MIB, json_text, text_bytes

from oracles import archive_reader as oracle
from capsem_core.errors import BadFileHeader, BlockFull, BodyTooLarge, LedgerError, SymlinkRefused, WriterPoisoned
from capsem_core.writer import BodyArchiveWriter


# --- the archive appender (§3.1, §8.2) ---------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_stage_names_the_real_block_offset_and_nothing_reaches_the_file_before_a_flush(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.stage(b"one") == (16, 0, 3)
        assert w.stage(b"three") == (16, 3, 5)
        assert path.stat().st_size == 16
        written = w.flush_segment()
        assert written.block_offset == 16 and written.raw_len == 8 and not written.closed
        assert written.disk_len == path.stat().st_size - 16
        assert w.end == path.stat().st_size
    assert oracle.ArchiveOracle(path).read(16, 3, 5) == b"three"


@pytest.mark.parametrize("codec", CODECS)
def test_a_flush_with_nothing_staged_writes_nothing(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.flush_segment() is None
        assert w.close_block() is None
        w.stage(b"x" * 10)
        w.flush_segment()
        size = path.stat().st_size
        assert w.flush_segment() is None
        assert path.stat().st_size == size


@pytest.mark.parametrize("codec", CODECS)
def test_five_flushes_grow_one_block_and_only_the_first_segment_carries_the_block_header(tmp_path, codec):
    path = tmp_path / "session.bodies"
    rng = random.Random(5)
    bodies = [text_bytes(rng, 700 + 100 * i) for i in range(5)]
    refs, disk = [], []
    with BodyArchiveWriter(path, codec=codec) as w:
        for body in bodies:
            refs.append(w.stage(body))
            disk.append(w.flush_segment().disk_len)
    assert {r[0] for r in refs} == {16}
    assert disk == sorted(set(disk))
    data = path.read_bytes()
    assert data.count(b"BLK2") == 1 and data[16:20] == b"BLK2"
    segments = oracle.walk_block(data, 16)
    assert len(segments) == 5 and not any(s.final for s in segments)
    reader = oracle.ArchiveOracle(path)
    assert [reader.read(*r) for r in refs] == bodies
    assert (reader.blocks_started, reader.segments_inflated) == (1, 5)


@pytest.mark.parametrize("codec", CODECS)
def test_close_writes_a_final_segment_and_the_next_body_opens_a_block_at_the_old_end(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        first = w.stage(b"carried by the close")
        closed = w.close_block()
        assert closed.closed and closed.raw_len == len(b"carried by the close")
        assert w.close_block() is None
        w.stage(b"idle")
        flushed = w.flush_segment()
        empty_close = w.close_block()
        assert empty_close.raw_len == flushed.raw_len and empty_close.disk_len > flushed.disk_len
        nxt = w.stage(b"next")
        assert nxt == (16 + closed.disk_len + empty_close.disk_len, 0, 4)
        w.flush_segment()
    data = path.read_bytes()
    first_block = oracle.walk_block(data, 16)
    assert len(first_block) == 1 and first_block[0].final
    idle_block = oracle.walk_block(data, 16 + closed.disk_len)
    assert [s.final for s in idle_block] == [False, True] and idle_block[1].raw_len == 0
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*first) == b"carried by the close"
    assert reader.read(*nxt) == b"next"
    with pytest.raises(oracle.OracleError, match="past the end of block"):
        reader.read(16, 0, len(b"carried by the close") + 1)


def test_wants_close_turns_true_at_exactly_one_mib_of_raw_bytes(tmp_path):
    with BodyArchiveWriter(tmp_path / "session.bodies") as w:
        w.stage(b"\0" * (MIB - 1))
        assert not w.wants_close
        w.stage(b"\0")
        assert w.wants_close
        w.close_block()
        assert not w.wants_close


def test_a_body_over_16_mib_is_too_large_and_one_that_does_not_fit_the_open_block_is_block_full(tmp_path):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path) as w:
        with pytest.raises(BodyTooLarge, match="16777216-byte block ceiling"):
            w.stage(b"\0" * (16 * MIB + 1))
        w.stage(b"a" * (10 * MIB))
        big = b"b" * (7 * MIB)
        with pytest.raises(BlockFull):
            w.stage(big)
        w.close_block()
        ref = w.stage(big)
        w.close_block()
    assert ref[1] == 0
    assert oracle.ArchiveOracle(path).read(*ref) == big


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_body_reads_back_empty(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        a = w.stage(b"")
        b = w.stage(b"after")
        w.close_block()
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*a) == b"" and reader.read(*b) == b"after"


def test_non_final_deflate_payloads_end_with_the_sync_flush_tail(tmp_path):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path) as w:
        for i in range(4):
            w.stage(os.urandom(300) + b"text" * i)
            w.flush_segment()
        w.close_block()
    data = path.read_bytes()
    for seg in oracle.walk_block(data, 16):
        payload = data[seg.at + 52:seg.end]
        assert payload.endswith(b"\x00\x00\xff\xff") != seg.final
    assert data.endswith(b"\x03\x00")  # the FINAL segment after a sync flush: an empty final block


def test_a_partial_write_poisons_the_writer_and_keeps_what_was_committed(tmp_path, monkeypatch):
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    good = w.stage(b"committed before the failure")
    w.flush_segment()
    end = w.end
    real_write = os.write

    def torn_write(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[:30]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", torn_write)
    w.stage(os.urandom(5000))
    with pytest.raises(WriterPoisoned, match="failed after 0 bytes"):
        w.flush_segment()
    monkeypatch.setattr(os, "write", real_write)
    assert w.poisoned and w.end == end
    assert path.stat().st_size == end + 30  # the torn prefix really is in the file
    for operation in (lambda: w.stage(b"x"), w.flush_segment, w.close_block):
        with pytest.raises(WriterPoisoned):
            operation()
    w.close()
    assert oracle.ArchiveOracle(path).read(*good) == b"committed before the failure"
    with BodyArchiveWriter(path) as again:
        assert again.end == end + 30
        ref = again.stage(b"after the tear")
        again.close_block()
    reader = oracle.ArchiveOracle(path)
    assert ref[0] == end + 30
    assert reader.read(*ref) == b"after the tear"
    assert reader.read(*good) == b"committed before the failure"


@pytest.mark.parametrize("codec", CODECS)
def test_a_reopened_writer_never_continues_an_old_block_even_after_a_torn_tail(tmp_path, codec):
    path = tmp_path / "session.bodies"
    with BodyArchiveWriter(path, codec=codec) as w:
        old = w.stage(b"open block, never closed")
        w.flush_segment()
    with open(path, "ab") as f:
        f.write(b"SGMT\x00torn")
    size = path.stat().st_size
    with BodyArchiveWriter(path, codec=codec) as w:
        assert w.end == size
        new = w.stage(b"new block")
        w.flush_segment()
    assert new == (size, 0, 9)
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*new) == b"new block" and reader.read(*old) == b"open block, never closed"


def test_open_refuses_a_symlink_and_leaves_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    link = tmp_path / "session.bodies"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefused, match="symlink"):
        BodyArchiveWriter(link)
    assert target.read_bytes() == b"precious"


def test_open_creates_mode_0600_and_narrows_a_widened_archive(tmp_path):
    path = tmp_path / "session.bodies"
    BodyArchiveWriter(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b"CAPSEMBL\x02\x00\x00\x00\x00\x00\x00\x00"
    os.chmod(path, 0o644)
    BodyArchiveWriter(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", [b"CAPSEMBL\x01\x00\x00\x00\x00\x00\x00\x00", b"SQLite format 3\x00", b"CAPS"])
def test_open_refuses_a_v1_archive_or_a_foreign_file_and_changes_nothing(tmp_path, content):
    path = tmp_path / "session.bodies"
    path.write_bytes(content)
    with pytest.raises(BadFileHeader, match="bad archive header"):
        BodyArchiveWriter(path)
    assert path.read_bytes() == content


def test_open_of_a_directory_is_an_error_naming_it(tmp_path):
    (tmp_path / "session.bodies").mkdir()
    with pytest.raises(LedgerError, match="session.bodies"):
        BodyArchiveWriter(tmp_path / "session.bodies")


def test_dropping_staged_bytes_warns_but_a_flushed_open_block_closes_quietly(tmp_path, recwarn):
    path = tmp_path / "session.bodies"
    w = BodyArchiveWriter(path)
    ref = w.stage(b"flushed, block left open")
    w.flush_segment()
    w.close()
    assert not [x for x in recwarn if issubclass(x.category, ResourceWarning)]
    assert oracle.ArchiveOracle(path).read(*ref) == b"flushed, block left open"
    w = BodyArchiveWriter(path)
    w.stage(b"never written")
    with pytest.warns(ResourceWarning, match="13 staged bytes never written"):
        w.close()


# --- torn files (§8.4) -----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_keeps_exactly_the_bodies_whose_segments_are_whole(tmp_path, codec):
    rng = random.Random(84)
    path = tmp_path / "session.bodies"
    refs: list[tuple[tuple[int, int, int], bytes, int]] = []
    with BodyArchiveWriter(path, codec=codec) as w:
        for i in range(4):
            body = text_bytes(rng, 300) if i % 2 == 0 else rng.randbytes(120)
            ref = w.stage(body)
            written = w.close_block() if i == 3 else w.flush_segment()
            refs.append((ref, body, written.block_offset + written.disk_len))
    data = path.read_bytes()
    torn = tmp_path / "torn.bodies"
    for cut in range(16, len(data) + 1):
        torn.write_bytes(data[:cut])
        shared = oracle.ArchiveOracle(torn)  # one reader for every ref, going on after failures
        for ref, body, segment_end in refs:
            for reader in (shared, oracle.ArchiveOracle(torn)):
                if segment_end <= cut:
                    assert reader.read(*ref) == body, (cut, ref)
                else:
                    with pytest.raises(oracle.OracleError):
                        reader.read(*ref)
        with BodyArchiveWriter(torn, codec=codec) as again:
            assert again.end == cut
            ref = again.stage(b"after the cut")
            again.close_block()
        assert ref[0] == cut
        assert oracle.ArchiveOracle(torn).read(*ref) == b"after the cut"


# --- stream properties (§8.6) ----------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_every_cut_at_a_flush_answers_every_reference_handed_out_so_far(tmp_path, codec):
    rng = random.Random(86)
    path = tmp_path / "session.bodies"
    refs: list[tuple[tuple[int, int, int], bytes]] = []
    with BodyArchiveWriter(path, codec=codec) as w:
        for step in range(60):
            kind = rng.random()
            body = (rng.randbytes(rng.randint(0, 20_000)) if kind < 0.45 else b"" if kind < 0.5
                    else text_bytes(rng, rng.randint(1, 8000)))
            refs.append((w.stage(body), body))
            if rng.random() < 0.4:
                (w.close_block if rng.random() < 0.3 else w.flush_segment)()
                cut = tmp_path / "cut.bodies"
                cut.write_bytes(path.read_bytes()[:w.end])
                reader = oracle.ArchiveOracle(cut)
                for ref, expected in refs:
                    # A block that so far holds only empty bodies has not been written yet.
                    if ref[0] + 8 <= w.end:
                        assert reader.read(*ref) == expected
        w.close_block()
    reader = oracle.ArchiveOracle(path)
    for ref, expected in rng.sample(refs, len(refs)):
        assert reader.read(*ref) == expected


@pytest.mark.parametrize("codec", CODECS)
def test_a_10_mib_incompressible_body_round_trips_in_one_segment_followed_by_a_small_one(tmp_path, codec):
    path = tmp_path / "session.bodies"
    big = random.Random(10).randbytes(10 * MIB)
    with BodyArchiveWriter(path, codec=codec) as w:
        a = w.stage(big)
        w.flush_segment()
        b = w.stage(b"small")
        w.close_block()
    assert len(oracle.walk_block(path.read_bytes(), 16)) == 2
    reader = oracle.ArchiveOracle(path)
    assert reader.read(*a) == big and reader.read(*b) == b"small"


@pytest.mark.parametrize("codec", CODECS)
def test_the_dictionary_survives_a_sync_flush(tmp_path, codec):
    path = tmp_path / "session.bodies"
    chunk = random.Random(8).randbytes(8 * 1024)
    with BodyArchiveWriter(path, codec=codec) as w:
        w.stage(chunk)
        first = w.flush_segment()
        ref = w.stage(chunk)
        second = w.flush_segment()
    assert second.disk_len - first.disk_len - 52 < 200
    assert oracle.ArchiveOracle(path).read(*ref) == chunk


def test_twelve_flushes_of_json_text_stay_within_3_percent_of_one_shot_level_6(tmp_path):
    text = json_text(random.Random(12), MIB)
    path = tmp_path / "session.bodies"
    step = len(text) // 12
    with BodyArchiveWriter(path) as w:
        for i in range(12):
            w.stage(text[i * step:(i + 1) * step if i < 11 else len(text)])
            w.flush_segment()
        w.close_block()
    one_shot = zlib.compressobj(6, zlib.DEFLATED, -15)
    baseline = len(one_shot.compress(text) + one_shot.flush())
    payload = sum(s.comp_len for s in oracle.walk_block(path.read_bytes(), 16))
    assert payload <= baseline * 1.03
