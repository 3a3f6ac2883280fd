"""Every body of a ledger to a file of its own in a directory, plus a manifest: the plain export.

Each verified body is written to ``DIR/{event_id}.{table}.{direction}.{blake3}`` (the name
policy is ``capsem_core.export.names``: ledger strings reduced to a safe charset, the
body's hash last; files are written through a descriptor of DIR, never through a link, and
renamed into place whole; only a regular file is replaced), then ``manifest.jsonl`` (one JSON
object per body: event_id, table, direction, content_type, hash, path relative to DIR)
replaces the old one. DIR is created if missing, its parent never. A rerun skips every file
already there whose bytes hash to its body's hash, so an interrupted export resumes where it
stopped. Damaged bodies are left out, counted and (the first ``MAX_FAULTS_KEPT``) returned.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from capsem_core._native import _blake3
from capsem_core.bodies.body_index import BodyIndex
from capsem_core.export.names import export_name, is_export_name
from capsem_core.outputs import file_at, open_output_dir, regular_size_at, remove_stale_parts, write_file_at
from capsem_core.verify import BodyFault

if TYPE_CHECKING:
    from capsem_core.ledger import Ledger

MANIFEST = "manifest.jsonl"
# Damaged bodies named in a summary (every one is counted).
MAX_FAULTS_KEPT = 1000
_READ_CHUNK = 1 << 20


@dataclass(slots=True)
class FilesSummary:
    """What an export to a directory did: bodies written, found already there (a rerun's),
    and left out as damaged (``faults``: the first ``MAX_FAULTS_KEPT`` of them)."""

    written: int = 0
    already_there: int = 0
    damaged: int = 0
    faults: list[BodyFault] = field(default_factory=list)

    @property
    def exported(self) -> int:
        """Bodies the manifest lists: written now or already there."""
        return self.written + self.already_there


def _already_written(dir_fd: int, name: str, size: int, digest: bytes) -> bool:
    """A file of that name and size whose bytes hash to the body's digest (a rerun's)."""
    if regular_size_at(dir_fd, name) != size:
        return False
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        data = bytearray()
        while len(data) <= size:
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return len(data) == size and _blake3.digest(data) == digest


def _name(idx: BodyIndex, i: int) -> str:
    """Row i's file name in the directory (made again where it is needed: no list of every
    name is held, so memory stays that of the index whatever the ledger's size)."""
    return export_name(idx.event_id[i], idx.source_table[i], idx.direction[i], bytes(idx.digest[i]).hex())


def export_files(ledger: Ledger, directory: os.PathLike[str] | str) -> FilesSummary:
    """Every body of ``ledger`` into ``directory`` (see the module). LedgerError for a
    directory the output policy refuses or a ledger that cannot be read; OSError when
    writing fails."""
    summary = FilesSummary()
    dir_fd = open_output_dir(directory, create=True)
    try:
        remove_stale_parts(dir_fd, lambda name: name == MANIFEST or is_export_name(name))
        idx = ledger.index()
        rows = len(idx)
        there = np.zeros(rows, np.bool_)
        for i in range(rows):
            there[i] = bool(idx.row_ok[i]) and _already_written(dir_fd, _name(idx, i), int(idx.body_len[i]),
                                                                bytes(idx.digest[i]))
        summary.already_there = int(there.sum())
        # A batch names its bodies by row id (unique): back to positions in idx.
        order = np.argsort(idx.id, kind="stable")
        sorted_ids = idx.id[order]
        listed = np.ones(rows, np.bool_)
        for batch in ledger.body_batches(np.flatnonzero(~there), index=idx, errors="skip"):
            where = order[np.searchsorted(sorted_ids, batch.id)]
            for k in range(len(batch)):
                write_file_at(dir_fd, _name(idx, int(where[k])), batch[k], directory)
            summary.written += len(batch)
            for fault in batch.findings:
                summary.damaged += 1
                if len(summary.faults) < MAX_FAULTS_KEPT:
                    summary.faults.append(fault)
                listed[order[np.searchsorted(sorted_ids, fault.row_id)]] = False
        # The manifest is streamed a line per body into its temporary file, renamed over the
        # old one only once whole.
        with file_at(dir_fd, MANIFEST, directory) as manifest:
            for i in range(rows):
                if not listed[i]:
                    continue
                manifest.write((json.dumps({"event_id": idx.event_id[i], "table": idx.source_table[i],
                                            "direction": idx.direction[i], "content_type": idx.content_type[i],
                                            "hash": idx.hash_text(i), "path": _name(idx, i)},
                                           ensure_ascii=True) + "\n").encode())
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return summary


__all__ = ["MANIFEST", "MAX_FAULTS_KEPT", "FilesSummary", "export_files"]
