"""The format constants the native archive module exports (defined once, in archive_format.h)
checked name by name, type and value, against the format's reference facts
(../shared/reference/capsem-ledger-facts.md beside the checkout, §2.2-2.4 and §2.7, written out here), and
capsem_core.format reading them instead of retyping them."""

from __future__ import annotations

import pytest

from capsem_core import format as fmt
from capsem_core._native import _archive, _blake3, _errors, _index

# name -> (type, value), from the reference facts.
FACTS = {
    "FILE_MAGIC": (bytes, b"CAPSEMBL"),             # §2.2: 43 41 50 53 45 4D 42 4C
    "FORMAT_VERSION": (int, 2),                     # §2.2: version u16 = 2
    "FILE_HEADER_BYTES": (int, 16),                 # §2.7
    "BLOCK_MAGIC": (bytes, b"BLK2"),                # §2.3: 42 4C 4B 32
    "BLOCK_HEADER_BYTES": (int, 8),                 # §2.7
    "SEGMENT_MAGIC": (bytes, b"SGMT"),              # §2.4: 53 47 4D 54
    "SEGMENT_HEADER_BYTES": (int, 52),              # §2.7
    "SEGMENT_FINAL": (int, 0x01),                   # §2.7: segment flag bit 0
    "MAX_BLOCK_RAW_BYTES": (int, 16_777_216),       # §2.7: 16 MiB
    "MAX_SEGMENT_EXPANSION": (int, 65_536),         # §2.7: 64 KiB
    "CODEC_DEFLATE": (int, 1),                      # §2.3: 1 = raw deflate
    "CODEC_ZSTD": (int, 2),                         # this project's codec extension (format.py)
    "SYNC_FLUSH_TAIL": (bytes, b"\x00\x00\xff\xff"),  # §2.4: required end of a non-final payload
    "BODY_HASH_PREFIX": (str, "blake3:"),           # body_hash = "blake3:" + 64 lower-case hex
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_every_exported_constant_has_the_reference_type_and_value(name):
    want_type, want = FACTS[name]
    got = getattr(_archive, name)
    assert type(got) is want_type, (name, type(got))
    assert got == want, (name, got, want)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_format_py_gives_the_native_value_itself(name):
    # Read from the native module, not retyped: the very object.
    assert getattr(fmt, name) is getattr(_archive, name) or getattr(fmt, name) == getattr(_archive, name)
    assert getattr(fmt, name) == FACTS[name][1]


def test_limits_agree_with_the_exported_constants():
    assert _archive.LIMITS == {
        "file_header_bytes": _archive.FILE_HEADER_BYTES, "block_header_bytes": _archive.BLOCK_HEADER_BYTES,
        "segment_header_bytes": _archive.SEGMENT_HEADER_BYTES, "max_block_raw_bytes": _archive.MAX_BLOCK_RAW_BYTES,
        "max_segment_expansion": _archive.MAX_SEGMENT_EXPANSION}


def test_packed_headers_are_the_reference_sizes():
    assert len(fmt.pack_file_header()) == 16 and fmt.pack_file_header()[:8] == b"CAPSEMBL"
    assert len(fmt.pack_block_header(fmt.CODEC_DEFLATE)) == 8
    assert len(fmt.pack_segment_header(True, 0, 0, 0, bytes(32))) == 52


def test_the_compiled_modules_live_in_the_native_package():
    for m in (_archive, _blake3, _errors, _index):
        assert m.__name__.startswith("capsem_core._native."), m.__name__
        assert ".".join(m.__file__.split("/")[-3:-1]) == "capsem_core._native", m.__file__
    assert _archive.ArchiveReader.__module__ == "capsem_core._native._archive"
