"""``capsem-ledger export [SESSION | --db PATH] DIR``: every body to a file, plus a manifest.
(``--warc OUT.warc.gz`` instead of DIR: the session as one WARC 1.1 file, ``export_warc.py``.)

Each verified body is written to ``DIR/{event_id}.{table}.{direction}.{blake3}`` (the name
policy is ``capsem_core.outputs.export_name``: ledger strings reduced to a safe charset, the
body's hash last; files are written through a descriptor of DIR, never through a link, and
renamed into place whole; only a regular file is replaced: ``capsem_core.outputs``), then
``manifest.jsonl`` (one JSON object per body: event_id, table, direction, content_type,
hash, path relative to DIR) replaces the old one. DIR is created if missing, its parent
never. A rerun
skips every file already there whose bytes hash to its body's hash, so an interrupted
export resumes where it stopped. Damaged bodies are left out and named on stderr (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from capsem_core._native import _blake3
from capsem_core.bodies import BodyIndex
from capsem_core.cli import export_warc
from capsem_core.cli.arguments import counted, ledger_target, output_argument, path_argument, session_argument
from capsem_core.cli.errors import UsageError
from capsem_core.cli.terminal import sanitize
from capsem_core.ledger import Ledger
from capsem_core.outputs import export_name, open_output_dir, regular_size_at, remove_stale_parts, write_file_at
from capsem_core.snapshot import refuse_symlinks

MANIFEST = "manifest.jsonl"
_READ_CHUNK = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # SESSION and DIR are both optional to the parser (DIR is not needed with --warc), so the
    # words are read here: one word is DIR (or, with --warc, SESSION), two are SESSION DIR.
    parser.add_argument("words", nargs="*", metavar="[SESSION] DIR",
                        help="the session (id or VM name; default: the latest in main.db) and the directory the "
                             "bodies go to (created if missing; its parent must exist; '' is refused)")
    parser.add_argument("--db", type=path_argument, metavar="PATH",
                        help="read this session.db, or the ledger directory holding it, directly (main.db is not "
                             "read; not together with SESSION)")
    parser.add_argument("--warc", type=output_argument("output file", stdout=True), metavar="OUT",
                        help="instead of DIR: the session as one WARC 1.1 file (gzip, one member per record), "
                             "as Capsem exports it; '-' is stdout")
    parser.add_argument("--warc-level", type=counted(0, 12), metavar="N",
                        help=f"libdeflate compression level of --warc, 0..12 (default {export_warc.DEFAULT_LEVEL})")


def _words(args: argparse.Namespace) -> None:
    """SESSION and DIR from the words, each checked as the parser checks its arguments."""
    words = list(args.words)
    wanted = 1 if args.warc is not None else 2
    if len(words) > wanted:
        raise UsageError("DIR and --warc are two different exports: give one of them" if args.warc is not None
                         else f"one SESSION and one DIR at most, not {len(words)} words")
    if args.warc is None and not words:
        raise UsageError("name what to export to: DIR, or --warc OUT.warc.gz")
    args.directory = None if args.warc is not None else words.pop()
    args.session = words.pop() if words else None
    for name, word, check in (("SESSION", args.session, session_argument),
                              ("DIR", args.directory, output_argument("output directory"))):
        try:
            if word is not None:
                check(word)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"argument {name}: {exc}") from None


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


def _names(idx: BodyIndex) -> list[str]:
    return [export_name(idx.event_id[i], idx.source_table[i], idx.direction[i], bytes(idx.digest[i]).hex())
            for i in range(len(idx))]


def run(args: argparse.Namespace) -> int:
    _words(args)
    if args.warc is not None:
        return export_warc.run(args)
    if args.warc_level is not None:
        raise UsageError("--warc-level is the compression of --warc: give --warc OUT with it")
    return _export_directory(args)


def _export_directory(args: argparse.Namespace) -> int:
    db_path = ledger_target(args)
    refuse_symlinks(db_path, archive=True)
    dir_fd = open_output_dir(args.directory, create=True)
    try:
        remove_stale_parts(dir_fd)
        with Ledger(db_path, block_cache_bytes=0) as ledger:
            idx = ledger.index()
            names = _names(idx)
            written_ok = np.ones(len(idx), np.bool_)
            todo = [i for i in range(len(idx))
                    if not (idx.row_ok[i] and _already_written(dir_fd, names[i], int(idx.body_len[i]),
                                                               bytes(idx.digest[i])))]
            skipped = len(idx) - len(todo)
            damaged = 0
            # A batch names its bodies by row id (unique): back to positions in idx.
            order = np.argsort(idx.id, kind="stable")
            sorted_ids = idx.id[order]
            for batch in ledger.body_batches(np.array(todo, np.intp), index=idx, errors="skip"):
                where = order[np.searchsorted(sorted_ids, batch.id)]
                for k in range(len(batch)):
                    write_file_at(dir_fd, names[int(where[k])], batch[k], args.directory)
                for fault in batch.findings:
                    damaged += 1
                    written_ok[order[np.searchsorted(sorted_ids, fault.row_id)]] = False
                    print(f"capsem-ledger export: skipped {sanitize(fault.message)}", file=sys.stderr)
        lines = []
        for i in np.flatnonzero(written_ok).tolist():
            lines.append(json.dumps({"event_id": idx.event_id[i], "table": idx.source_table[i],
                                     "direction": idx.direction[i], "content_type": idx.content_type[i],
                                     "hash": idx.hash_text(i), "path": names[i]}, ensure_ascii=True) + "\n")
        write_file_at(dir_fd, MANIFEST, "".join(lines).encode(), args.directory)
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    print(f"exported {len(lines)} bodies to {sanitize(args.directory)} ({skipped} already there"
          + (f", {damaged} damaged left out" if damaged else "") + ")", file=sys.stderr)
    return 1 if damaged else 0


__all__ = ["MANIFEST", "add_arguments", "run"]
