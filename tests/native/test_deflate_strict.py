"""Deflate payloads libdeflate decodes and zlib refuses: Capsem's reader is zlib, so the
libdeflate fast path (verify kernel, ArchiveReader, Ledger reads, check --verify-bodies)
must call each one damaged, the same `inflate` finding a corrupt stream gets."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import zlib
from pathlib import Path

import pytest

from capsem_core import errors
from capsem_core._native import _archive
from capsem_core.check.run import check_ledger
from capsem_core.ledger import Ledger
from oracles import baseline_verify as baseline
from tests.native.test_verify_kernel import _Bits, _one_block_ledger, _rewrite_block, _segs, _sync_payload, kernel

_SECOND = b"second body " * 4


def _libdeflate(payload: bytes, raw_len: int) -> bytes:
    """What libdeflate makes of a non-final payload (closed by an empty final stored block)."""
    lib = ctypes.CDLL(ctypes.util.find_library("deflate") or "libdeflate.so.0")
    lib.libdeflate_alloc_decompressor.restype = ctypes.c_void_p
    lib.libdeflate_free_decompressor.argtypes = [ctypes.c_void_p]
    lib.libdeflate_deflate_decompress.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                                  ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    d = lib.libdeflate_alloc_decompressor()
    try:
        data = payload + b"\x01\x00\x00\xff\xff"
        out = ctypes.create_string_buffer(raw_len + 1)
        got = ctypes.c_size_t()
        assert lib.libdeflate_deflate_decompress(d, data, len(data), out, raw_len + 1, ctypes.byref(got)) == 0
        return out.raw[:got.value]
    finally:
        lib.libdeflate_free_decompressor(d)


def _sync_end(w: _Bits) -> bytes:
    """The writer's bits, then the empty stored block a sync flush ends a segment with."""
    w.field(0, 3)
    return w.bytes() + b"\x00\x00\xff\xff"


def _dynamic_a_only(hlit: int, hdist: int, n: int) -> bytes:
    """A dynamic block of HLIT + 257 literal/length and HDIST + 1 distance codes, of which only
    'a' and end-of-block have one (1 bit each), holding n 'a's: legal but for the counts."""
    total = hlit + 257 + hdist + 1
    w = _Bits()
    w.field(0, 1)
    w.field(2, 2)                                  # BFINAL 0, dynamic Huffman
    w.field(hlit, 5)
    w.field(hdist, 5)
    w.field(14, 4)                                 # 18 code-length codes sent, up to symbol 1
    order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1]
    for sym in order:
        w.field(1 if sym in (1, 18) else 0, 3)     # code-length codes: 1 -> '0', 18 -> '1'
    def zeros(k: int) -> None:
        while k:
            run = min(k, 138)
            w.code(1, 1)
            w.field(run - 11, 7)
            k -= run
    zeros(ord("a"))
    w.code(0, 1)                                   # 'a': length 1
    zeros(256 - ord("a") - 1)
    w.code(0, 1)                                   # end-of-block: length 1
    zeros(total - 257)
    for _ in range(n):
        w.code(0, 1)                               # 'a' is code 0, end-of-block code 1
    w.code(1, 1)
    return _sync_end(w)


def _fixed(symbols: list[tuple[str, int, int]]) -> _Bits:
    """A fixed-Huffman block of (kind, value, extra) items: literal, length symbol, distance
    code with its extra bits; end-of-block last."""
    w = _Bits()
    w.field(0, 1)
    w.field(1, 2)                                  # BFINAL 0, fixed Huffman
    for kind, value, extra in symbols:
        if kind == "lit":
            w.fixed_litlen(value)
        else:
            w.code(value, 5)                       # a fixed distance code is 5 bits
            w.field(0, extra)
    w.fixed_litlen(256)
    return w


def _hlit_287():
    return b"a" * 40, _dynamic_a_only(30, 0, 40), "too many length or distance symbols"


def _hdist_31():
    return b"a" * 40, _dynamic_a_only(0, 30, 40), "too many length or distance symbols"


def _length_286():
    # libdeflate reads symbol 286 as length 258 (no extra bits); distance code 0 is 1.
    items = [("lit", ord("a"), 0)] * 3 + [("lit", 286, 0), ("dist", 0, 0)]
    return b"a" * 261, _sync_end(_fixed(items)), "invalid literal/length code"


def _distance_30():
    # A stored block of history, then length 3 at distance code 30, which libdeflate reads as
    # 24577 plus 13 extra bits (0 here).
    history = bytes(range(256)) * 118
    stored = b"\x00" + struct.pack("<HH", len(history), len(history) ^ 0xFFFF) + history
    payload = stored + _sync_end(_fixed([("lit", 257, 0), ("dist", 30, 13)]))
    return history + history[-24577:][:3], payload, "invalid distance code"


CASES = {"hlit-287": _hlit_287, "hdist-31": _hdist_31, "length-symbol-286": _length_286,
         "distance-code-30": _distance_30}


@pytest.fixture(params=sorted(CASES))
def forged(request, tmp_path) -> tuple[Path, bytes]:
    """A closed block whose first segment is the case's payload (hashes written to what
    libdeflate makes of it), a second body, the FINAL segment; (session.db, first body)."""
    raw, payload, message = CASES[request.param]()
    with pytest.raises(zlib.error, match=message):
        zlib.decompressobj(-15).decompress(payload)
    assert _libdeflate(payload, len(raw)) == raw
    db = _one_block_ledger(tmp_path, [raw, _SECOND])
    final = _segs(db)[2]
    data = db.with_suffix(".bodies").read_bytes()
    _rewrite_block(db, [(False, raw, payload), (False, _SECOND, _sync_payload(_SECOND, raw)),
                        (True, b"", data[final.at + 52:final.end])])
    return db, raw


def test_the_kernel_calls_a_payload_zlib_refuses_an_inflate_failure_with_or_without_libdeflate(forged):
    db, _ = forged
    want = baseline.verify_ledger(db)
    assert want[0] == 0 and len(want[1]) == 2 and {f[8] for f in want[1]} == {"inflate"}
    for threads in (1, 2):
        assert kernel(db, threads=threads, use_libdeflate=True) == want
        assert kernel(db, threads=threads, use_libdeflate=False) == want


def test_the_reader_refuses_a_payload_zlib_refuses_with_or_without_libdeflate(forged):
    db, raw = forged
    for use_libdeflate in (True, False):
        with _archive.ArchiveReader(db.with_suffix(".bodies"), use_libdeflate=use_libdeflate) as reader:
            with pytest.raises(errors.InflateError):
                reader.read(16, 0, len(raw))
            with pytest.raises(errors.InflateError):
                reader.read(16, len(raw), len(_SECOND))


def test_ledger_reads_refuse_a_payload_zlib_refuses(forged):
    db, _ = forged
    with Ledger(db.parent) as ledger:
        with pytest.raises(errors.InflateError):
            ledger.read_body("000000000000", "net_events", "request")
        with pytest.raises(errors.InflateError):
            ledger.read_bodies()
        with pytest.raises(errors.InflateError):
            list(ledger.bodies())
        batch = ledger.read_bodies(errors="report")
        assert not batch.ok.any() and len(batch.findings) == 2


def test_check_verify_bodies_calls_a_payload_zlib_refuses_damaged(forged):
    db, _ = forged
    report = check_ledger(db, verify_bodies=True)
    assert not report.sound
