"""The floor of verify-bodies: the work no verifier of a ledger can skip, and nothing else.

Every verifier must inflate each referenced segment once and hash every byte twice (each
segment's raw bytes against its header, each distinct body span against its index row).
``plan`` reads the large sample's index and segment headers once, up front; ``run`` then
does only that work, with the fastest primitives on this machine and none of a verifier's
checks or bookkeeping: one libdeflate call per block over its joined segment payloads, then
its segments and body spans hashed (one ``hash_many`` call per block, or one ``blake3``
package call per span). The baseline's time divided by
this one is the highest ratio any single-threaded kernel built on these primitives can show.

The digests are still compared (segments with their headers, bodies with the index), so a
floor that inflated or hashed the wrong bytes fails instead of reporting a time.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import blake3
import numpy as np

from capsem_core._native import _blake3
from capsem_core.format import BLOCK_HEADER_BYTES, CODEC_DEFLATE, SEGMENT_HEADER_BYTES
from capsem_core.paths import archive_path_for
from oracles.archive_reader import BLOCK_MAGIC, parse_segment

# A final stored block of length 0: ends a stream whose last payload is a sync flush.
_FINAL_EMPTY_STORED = b"\x01\x00\x00\xff\xff"


@dataclass
class BlockWork:
    payload: bytes            # the block's segment payloads up to the last referenced span, joined
    raw_len: int              # what they inflate to
    offsets: np.ndarray       # segment spans, then distinct body spans (uint64)
    lengths: np.ndarray
    expected: np.ndarray      # (n, 32) uint8: segment header digests, then index digests


def plan(db: Path) -> list[BlockWork]:
    """The deflate blocks the index references, with what must be inflated and hashed."""
    con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT DISTINCT block_offset, body_offset, body_len, body_hash FROM event_body_blobs "
                           "ORDER BY block_offset, body_offset").fetchall()
    finally:
        con.close()
    spans: dict[int, dict[tuple[int, int], bytes]] = {}
    for block, offset, length, text in rows:
        spans.setdefault(block, {})[(offset, length)] = bytes.fromhex(text[len("blake3:"):])
    work = []
    with open(archive_path_for(db), "rb") as f:
        for block, bodies in spans.items():
            f.seek(block)
            head = f.read(BLOCK_HEADER_BYTES)
            if len(head) < BLOCK_HEADER_BYTES or head[:4] != BLOCK_MAGIC or head[4] != CODEC_DEFLATE:
                continue  # zstd: not part of the deflate floor
            need = max(o + n for o, n in bodies)
            payload, seg_offs, seg_lens, seg_digests = [], [], [], []
            raw = 0
            final = False
            while raw < need or (raw == 0 and not final):
                at = f.tell()
                seg = parse_segment(f.read(SEGMENT_HEADER_BYTES), at, raw)
                payload.append(f.read(seg.comp_len))
                seg_offs.append(raw)
                seg_lens.append(seg.raw_len)
                seg_digests.append(seg.digest)
                raw += seg.raw_len
                final = seg.final
                if final:
                    break
            if not final:
                payload.append(_FINAL_EMPTY_STORED)
            body_offs, body_lens = zip(*bodies)
            work.append(BlockWork(
                payload=b"".join(payload),
                raw_len=raw,
                offsets=np.array(seg_offs + list(body_offs), dtype=np.uint64),
                lengths=np.array(seg_lens + list(body_lens), dtype=np.uint64),
                expected=np.frombuffer(b"".join(seg_digests + list(bodies.values())), dtype=np.uint8).reshape(-1, 32),
            ))
    return work


class _Libdeflate:
    """libdeflate's one-shot raw-deflate decompressor, through ctypes: the kernel's library, or
    the one ``$CAPSEM_BENCH_LIBDEFLATE`` names (any build exporting libdeflate's API, to see
    what a newer release would change)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(os.environ.get("CAPSEM_BENCH_LIBDEFLATE", "libdeflate.so.0"))
        lib.libdeflate_alloc_decompressor.restype = ctypes.c_void_p
        lib.libdeflate_free_decompressor.argtypes = [ctypes.c_void_p]
        lib.libdeflate_deflate_decompress.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                                      ctypes.c_void_p, ctypes.c_size_t,
                                                      ctypes.POINTER(ctypes.c_size_t)]
        self.lib = lib
        self.handle = lib.libdeflate_alloc_decompressor()
        self.got = ctypes.c_size_t()

    def inflate(self, payload: bytes, out: ctypes.Array, raw_len: int) -> None:
        rc = self.lib.libdeflate_deflate_decompress(self.handle, payload, len(payload), out, raw_len,
                                                   ctypes.byref(self.got))
        if rc != 0 or self.got.value != raw_len:
            raise RuntimeError(f"libdeflate returned {rc} after {self.got.value} of {raw_len} bytes")

    def close(self) -> None:
        self.lib.libdeflate_free_decompressor(self.handle)


def _hash_ours(buffer: memoryview, w: BlockWork) -> np.ndarray:
    return _blake3.hash_many(buffer, w.offsets, w.lengths)


def _hash_package(buffer: memoryview, w: BlockWork) -> np.ndarray:
    return np.frombuffer(b"".join(blake3.blake3(buffer[o:o + n]).digest()
                                  for o, n in zip(w.offsets.tolist(), w.lengths.tolist())),
                         dtype=np.uint8).reshape(-1, 32)


HASHERS: dict[str, Callable[[memoryview, BlockWork], np.ndarray]] = {"ours": _hash_ours, "package": _hash_package}


def run(work: list[BlockWork], hasher: str = "ours") -> tuple[int, int, float, float]:
    """(bytes inflated, bytes hashed, seconds inflating, seconds hashing), one pass over ``work``."""
    hash_fn = HASHERS[hasher]
    inflater = _Libdeflate()
    out = ctypes.create_string_buffer(max((w.raw_len for w in work), default=1))
    view = memoryview(out).cast("B")
    inflated = hashed = 0
    inflate_s = hash_s = 0.0
    try:
        for w in work:
            t0 = time.perf_counter()
            inflater.inflate(w.payload, out, w.raw_len)
            t1 = time.perf_counter()
            digests = hash_fn(view, w)
            hash_s += time.perf_counter() - t1
            inflate_s += t1 - t0
            inflated += w.raw_len
            hashed += int(w.lengths.sum())
            if not np.array_equal(digests, w.expected):
                raise RuntimeError("a digest of the floor differs from its header or index row")
    finally:
        view.release()
        inflater.close()
    return inflated, hashed, inflate_s, hash_s
