"""A ledger's bodies as one WARC 1.1 file, readable by any web-archive tool: the export walk.

Bodies are read in archive order by ``Ledger.body_batches`` (each block inflated once, every
body checked against its segment and body hashes by the verify kernel, ``errors="report"`` so
a damaged block costs only its own bodies), in batches of at most ``max_bytes`` body bytes.
Each batch's bodies are matched to their source rows in bulk (``warc_sources``), described
(``warc_fields``) or skipped by reason (``warc_summary``), and compressed by ``_native._warc``
into one gzip member per record on every core, written in order. Memory holds the body
index, one batch and the records of one part of it, whatever the ledger's size.

The file opens with a ``warcinfo`` record and closes with another that counts what was
written and skipped: a file without the closing record is an export that did not finish.
A path destination goes through ``capsem_core.outputs.output_stream``: nothing appears under
the name until the closing record is written, and a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import numpy.typing as npt

from capsem_core import __version__, cores
from capsem_core._native import _warc
from capsem_core.errors import LedgerError
from capsem_core.export import warc_fields as fields
from capsem_core.export import warc_records
from capsem_core.export import warc_sources as sources
from capsem_core.export.warc_records import BatchRecords
from capsem_core.export.warc_summary import Tally, WarcSummary
from capsem_core.outputs import output_stream

if TYPE_CHECKING:
    from capsem_core.ledger import Ledger

SOFTWARE = f"capsem-core/{__version__}"
DEFAULT_LEVEL = 6
# Body bytes per batch the kernel reads (and per compression pass at most).
DEFAULT_BATCH_BYTES = 64 << 20
# Records described, compressed and written together: bounds the header bytes held (each URI
# and content type is at most 64 KiB) and lets writing start early in a batch of small bodies.
PART_RECORDS = 1024

Destination = os.PathLike[str] | str | BinaryIO


def _opening_fields(session: str, exported_at: str) -> list[tuple[str, str]]:
    return [("software", SOFTWARE), ("format", "WARC File Format 1.1"), ("capsem-session", session),
            ("capsem-exported-at", exported_at), ("capsem-block-digest-algorithm", "blake3")]


def session_name(ledger: Ledger) -> str:
    """The name the records carry: the ledger directory's name (the session id, or the VM's
    name under run/persistent/). LedgerError when a header cannot carry it."""
    name = ledger.directory.name
    if not name or fields.id_part(name.encode("utf-8", "surrogateescape")) is None:
        raise LedgerError("the ledger directory's name cannot be part of a WARC record id (it is empty, holds a "
                          "control character, a line break, ':', '<', '>' or a space, is not UTF-8 or is over "
                          "64 KiB): copy the ledger under another name", ledger.directory)
    return name


class _Members:
    """Records compressed into gzip members and written in order, counted in the tally."""

    def __init__(self, out: BinaryIO, level: int, threads: int, tally: Tally) -> None:
        self.out = out
        self.gzip = _warc.GzipMembers(level, threads)
        self.tally = tally
        self.buffer: npt.NDArray[np.uint8] | None = None  # reused from call to call

    def write(self, heads: list[bytes], bodies: bytes | npt.NDArray[np.uint8], body_offsets: npt.ArrayLike,
              body_lengths: npt.ArrayLike) -> None:
        head_offsets = np.zeros(len(heads) + 1, np.int64)
        np.cumsum([len(h) for h in heads], out=head_offsets[1:])
        self.buffer, total, _ = self.gzip.compress(b"".join(heads), head_offsets, bodies, body_offsets,
                                                   body_lengths, fields.RECORD_TRAILER, out=self.buffer)
        self.out.write(self.buffer[:total].data)
        self.tally.bytes += total

    def write_whole(self, record: bytes) -> None:
        """One record already whole (a warcinfo): its own member."""
        self.write([record], b"", [0], [0])


def write_warc(ledger: Ledger, out: BinaryIO, query: sources.Query, *, level: int = DEFAULT_LEVEL,
               threads: int = 0, max_bytes: int = DEFAULT_BATCH_BYTES) -> WarcSummary:
    """Write every body of ``ledger`` to the binary file ``out`` as WARC 1.1 records, opened
    and closed by warcinfo records (see the module). ``query`` reads session.db."""
    session = session_name(ledger)
    exported_at = fields.warc_date_now()
    export_id = uuid.uuid4().hex
    tally = Tally()
    members = _Members(out, level, min(cores.threads(threads), _warc.MAX_THREADS), tally)
    members.write_whole(fields.warcinfo_record(session, "opening", export_id, exported_at,
                                               _opening_fields(session, exported_at)))
    idx = ledger.index(threads=threads)
    name = session.encode("utf-8")
    memos = warc_records.Memos()
    for batch in ledger.body_batches(None, index=idx, errors="report", max_bytes=max_bytes, threads=threads):
        walk = BatchRecords(batch, name, query, tally, memos)
        for start in range(0, len(batch), PART_RECORDS):
            heads, kept = walk.part(start, min(len(batch), start + PART_RECORDS))
            if kept:
                members.write(heads, batch.buffer, batch.offsets[kept], batch.lengths[kept])
                tally.records += len(kept)
    members.write_whole(fields.warcinfo_record(session, "closing", export_id, exported_at,
                                               [("software", SOFTWARE), *tally.closing_fields()]))
    out.flush()
    return tally.summary(session, export_id, exported_at)


def check_options(level: int, threads: int, max_bytes: int) -> None:
    """ValueError for a level outside libdeflate's 0..12, a negative thread count or a batch
    bound below one byte."""
    if type(level) is not int or not 0 <= level <= _warc.MAX_LEVEL:
        raise ValueError(f"level is libdeflate's 0..{_warc.MAX_LEVEL}, not {level!r}")
    cores.checked(threads)
    if type(max_bytes) is not int or max_bytes < 1:
        raise ValueError(f"max_bytes is at least 1, not {max_bytes!r}")


def export_warc(ledger: Ledger, destination: Destination, query: sources.Query, *, level: int = DEFAULT_LEVEL,
                threads: int = 0, max_bytes: int = DEFAULT_BATCH_BYTES) -> WarcSummary:
    """``Ledger.export_warc``: to a binary file object (written, not closed), or to a path
    (or ``-``, standard output) under the output-path policy."""
    check_options(level, threads, max_bytes)
    session_name(ledger)  # refused before anything is created
    if hasattr(destination, "write"):
        return write_warc(ledger, destination, query, level=level, threads=threads,  # type: ignore[arg-type]
                          max_bytes=max_bytes)
    with output_stream(destination, inputs=(ledger.db_path, ledger.bodies_path)) as out:
        summary = write_warc(ledger, out, query, level=level, threads=threads, max_bytes=max_bytes)
    return summary


__all__ = ["DEFAULT_BATCH_BYTES", "DEFAULT_LEVEL", "SOFTWARE", "check_options", "export_warc", "session_name",
           "write_warc"]
