"""The one status table (common/status.c): every status and verify outcome has a kind, an
exception and a message; native errors are built from it; capsem_core.errors re-exports
the hierarchy the native core owns, with the names, bases and constructor of before."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from capsem_core import errors
from capsem_core._native import _archive, _errors

HIERARCHY = {
    "LedgerError": "Exception", "ArchiveError": "LedgerError", "BadFileHeader": "ArchiveError",
    "BadBlockHeader": "ArchiveError", "UnsupportedCodec": "ArchiveError", "BadSegment": "ArchiveError",
    "IntegrityError": "ArchiveError", "InflateError": "ArchiveError", "TruncatedBlock": "ArchiveError",
    "RefOutOfRange": "ArchiveError", "BodyHashMismatch": "ArchiveError", "SymlinkRefused": "LedgerError",
    "SchemaMismatch": "LedgerError", "WriterBusy": "LedgerError", "WriterPoisoned": "LedgerError",
    "BodyTooLarge": "LedgerError", "BlockFull": "LedgerError", "RowRejected": "LedgerError",
    "CursorError": "LedgerError",
}

# Every archive status (1..9) and verify outcome, with the kind findings report today.
KINDS = {
    "CAPSEM_E_FILE_HEADER": "bad_file_header", "CAPSEM_E_BLOCK_HEADER": "bad_block_header",
    "CAPSEM_E_CODEC": "unsupported_codec", "CAPSEM_E_SEGMENT": "bad_segment", "CAPSEM_E_TRUNCATED": "truncated",
    "CAPSEM_E_INTEGRITY": "integrity", "CAPSEM_E_INFLATE": "inflate", "CAPSEM_E_RANGE": "out_of_range",
    "CAPSEM_E_NOMEM": "nomem", "CAPSEM_V_BODY_HASH": "body_hash", "CAPSEM_V_BAD_HASH_TEXT": "bad_body_hash_text",
    "CAPSEM_V_SPAN": "out_of_range", "CAPSEM_R_SEGMENT_HASH": "segment_hash",
}


@pytest.mark.parametrize("name", sorted(HIERARCHY))
def test_the_hierarchy_keeps_every_name_and_base(name):
    cls = getattr(errors, name)
    assert cls is getattr(_errors, name)
    assert cls.__bases__[0].__name__ == HIERARCHY[name]
    assert cls.__module__ == "capsem_core.errors"
    assert name in errors.__all__


def test_ledger_error_keeps_its_constructor_path_and_detail():
    e = errors.BadSegment("bad segment at offset 7", "/x/session.bodies")
    assert e.path == Path("/x/session.bodies") and e.detail == "bad segment at offset 7"
    assert str(e) == "/x/session.bodies: bad segment at offset 7"
    bare = errors.WriterBusy("busy")
    assert bare.path is None and str(bare) == "busy"
    assert type(pickle.loads(pickle.dumps(e))) is errors.BadSegment


def test_the_hierarchy_has_one_public_home_and_format_does_not_offer_it():
    from capsem_core import format as fmt

    for name in HIERARCHY:
        assert name not in fmt.__all__
        assert getattr(errors, name).__module__ == "capsem_core.errors"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_status_has_its_kind_exception_and_message(name):
    code = getattr(_errors, name)
    row = _errors.status(code)
    assert row.name == name and row.kind == KINDS[name]
    assert row.message and isinstance(_errors.exception_class(code), type)
    assert issubclass(_errors.exception_class(code), errors.ArchiveError if code != _errors.CAPSEM_E_NOMEM
                      else MemoryError)


def test_codes_are_unique_and_every_exception_name_resolves():
    codes = [s.code for s in _errors.STATUSES]
    assert len(codes) == len(set(codes))
    for s in _errors.STATUSES:
        if s.exception is not None:
            _errors.exception_class(s.code)


def test_messages_are_worded_as_capsem_words_them():
    E = _errors
    assert E.message(E.CAPSEM_E_BLOCK_HEADER, at=16) == "bad block header at offset 16"
    assert E.message(E.CAPSEM_E_CODEC, at=16, codec=9) == "block at offset 16 uses unsupported codec 9"
    assert E.message(E.CAPSEM_E_SEGMENT, at=24) == "bad segment at offset 24"
    assert E.message(E.CAPSEM_E_SEGMENT, at=24, detail="x") == "bad segment at offset 24: x"
    assert E.message(E.CAPSEM_R_SEGMENT_HASH, at=76, detail="d", block=16) == (
        "block at offset 16: segment at offset 76 failed integrity check: d")
    # A segment-level text at its own block's offset does not name the block twice.
    assert E.message(E.CAPSEM_E_INFLATE, at=16, detail="bad", block=16) == "segment at offset 16 did not inflate: bad"
    assert E.message(E.CAPSEM_E_TRUNCATED, at=16, block=99) == (
        "block at offset 16 is truncated: the file ends inside its payload")
    assert E.message(E.CAPSEM_V_BODY_HASH, want="blake3:aa", got="blake3:bb") == (
        "archived body does not match the row that named it: index says blake3:aa, bytes hash to blake3:bb")
    assert E.message(E.CAPSEM_V_BODY_HASH, detail="ev1", want="a", got="b") == (
        "archived body of ev1 does not match the row that named it: index says a, bytes hash to b")


def test_report_code_refines_integrity_by_the_hash_mismatch_flag():
    assert _errors.report_code(_errors.CAPSEM_E_INTEGRITY, True) == _errors.CAPSEM_R_SEGMENT_HASH
    assert _errors.report_code(_errors.CAPSEM_E_INTEGRITY, False) == _errors.CAPSEM_E_INTEGRITY
    assert _errors.report_code(_errors.CAPSEM_E_SEGMENT, True) == _errors.CAPSEM_E_SEGMENT


def test_native_raises_the_table_s_exception_with_its_text(tmp_path):
    with pytest.raises(errors.BadFileHeader) as bad:
        _archive.check_file_header(b"NOTAFILE" + bytes(8), tmp_path / "x")
    assert bad.value.detail == _errors.message(_errors.CAPSEM_E_FILE_HEADER) and bad.value.path == tmp_path / "x"
    with pytest.raises(errors.UnsupportedCodec, match="block at offset 40 uses unsupported codec 7"):
        _archive.parse_block_header(b"BLK2\x07\x00\x00\x00", 40)
    with pytest.raises(errors.TruncatedBlock, match="segment at offset 5 is truncated: the file ends inside its header"):
        _archive.parse_segment_header(b"SGMT", 5, 0)
    short = tmp_path / "short.bodies"
    short.write_bytes(b"CAPSEM")
    with pytest.raises(errors.BadFileHeader, match="6 bytes, shorter than the 16-byte file header"):
        _archive.ArchiveReader(short)
    link = tmp_path / "link.bodies"
    link.symlink_to(short)
    with pytest.raises(errors.SymlinkRefused, match="archive path is a symlink"):
        _archive.ArchiveReader(link)
