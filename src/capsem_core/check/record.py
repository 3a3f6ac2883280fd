"""The verification record: what ``--incremental`` remembers of a ledger between runs.

One small file per ledger in the user's cache (``$CAPSEM_CORE_VERIFIED_DIR``, else
``$XDG_CACHE_HOME/capsem-core/verified`` where that is absolute, else
``~/.cache/capsem-core/verified``), never beside the ledger: reading a ledger writes nothing
to it. The file is named after the archive's absolute path and holds the ledger's identity
and, per verified block, its extent, a fingerprint of its on-disk bytes and segment hashes, a
digest of the index rows that name it, and when it was verified: bytes per block, not per body.

Layout (little-endian): a 96-byte header (magic ``CAPSEMVR``, version, entry size, the
identity, the block count), ``count`` entries of ``ENTRY.itemsize`` bytes in block order,
then the BLAKE3 digest of everything before it. A record is trusted only when it is a
regular file of ours that no one else may write, its digest holds, its count is bounded by
the ledger's own block count before anything is read, and its identity is the ledger's;
anything else is ignored with a one-line reason (``load`` never raises on a bad record).
Written atomically: a temporary file in the same directory (mode 0600), fsync, rename.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from capsem_core._native import _archive, _blake3
from capsem_core._native._archive import BLOCK_HEADER_BYTES, FILE_HEADER_BYTES, SEGMENT_HEADER_BYTES
from capsem_core.errors import LedgerError
from capsem_core.outputs import PART_SUFFIX, write_file_at
from capsem_core.paths import NotRegularFile, open_regular

RECORD_DIR_ENV = "CAPSEM_CORE_VERIFIED_DIR"
MAGIC = b"CAPSEMVR"
VERSION = 1
# One verified block. ``bodies`` and ``rows``: how many index rows name the block and the
# digest of their spans and body hashes (a row added or edited later is not what was verified).
ENTRY = np.dtype([("block_offset", "<i8"), ("disk_len", "<i8"), ("raw_len", "<i8"), ("bodies", "<i8"),
                  ("verified_at", "<i8"), ("disk_hash", "u1", (32,)), ("segments", "u1", (32,)),
                  ("rows", "u1", (32,))])
# The latest verification time a record may hold (seconds since the epoch): 9999-12-31
# 23:59:59 UTC, the last second a date can show.
LATEST_VERIFIED_AT = 253402300799
_HEADER = struct.Struct("<8sII4QQ32sQ")
HEADER_BYTES = _HEADER.size
DIGEST_BYTES = 32
# The bytes that say which archive this is: the file header, the first block's header and
# its first segment's header (with that segment's BLAKE3): append-only, so they never change
# once written, and another ledger's are different.
IDENTITY_PREFIX_BYTES = FILE_HEADER_BYTES + BLOCK_HEADER_BYTES + SEGMENT_HEADER_BYTES
Entries = npt.NDArray[np.void]


@dataclass(frozen=True, slots=True)
class Identity:
    """What distinguishes this ledger's files from a replacement: both files' device and
    inode (a rewrite, a retention copy or a restore makes new ones) and the digest of the
    archive's first ``prefix_len`` bytes."""

    bodies_dev: int
    bodies_ino: int
    db_dev: int
    db_ino: int
    prefix_len: int
    prefix_hash: bytes

    def differs_from(self, other: Identity) -> str | None:
        """Why ``other`` (a record's identity) is not this ledger's, or None when it is."""
        if (self.bodies_dev, self.bodies_ino) != (other.bodies_dev, other.bodies_ino):
            return "session.bodies was replaced or rewritten since it was recorded"
        if (self.db_dev, self.db_ino) != (other.db_dev, other.db_ino):
            return "session.db was replaced since it was recorded"
        if self.prefix_hash != other.prefix_hash:
            return "session.bodies begins with other bytes than the recorded archive"
        return None


def identity_of(reader: _archive.ArchiveReader, db_path: Path, prefix_len: int | None = None) -> Identity:
    """The identity of the open archive and its session.db; ``prefix_len`` (a record's) says
    how many leading bytes to fingerprint (default: IDENTITY_PREFIX_BYTES, or the whole file
    when shorter)."""
    size = reader.size
    if prefix_len is None or prefix_len > size:
        prefix_len = min(size, IDENTITY_PREFIX_BYTES)
    prints = _archive.hash_extents(reader, [0], [prefix_len], threads=1)
    dev, ino = reader.identity
    st = os.stat(db_path)
    return Identity(dev, ino, st.st_dev, st.st_ino, prefix_len, bytes(prints.disk_hash[0]))


def record_dir(environ: dict[str, str] | None = None) -> Path:
    """Where verification records live (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if env.get(RECORD_DIR_ENV):
        return Path(env[RECORD_DIR_ENV])
    # The XDG base directory rules: a relative XDG_CACHE_HOME is invalid and ignored (else the
    # records would follow the current directory, and the next run would find none).
    xdg = env.get("XDG_CACHE_HOME", "")
    cache = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return cache / "capsem-core" / "verified"


def record_path(bodies_path: Path, directory: Path | None = None) -> Path:
    """The record of the archive at ``bodies_path`` (named by its absolute path's digest)."""
    key = _blake3.hexdigest(os.fsencode(os.path.abspath(bodies_path)))[:32]
    return (directory if directory is not None else record_dir()) / f"{key}.record"


@dataclass(slots=True)
class Record:
    """A trusted record: the ledger's identity and its verified blocks (ENTRY rows, ordered
    by block_offset)."""

    identity: Identity
    entries: Entries


def load(path: Path, identity: Callable[[int], Identity], max_blocks: int) -> tuple[Record | None, str | None]:
    """(record, None) when the record at ``path`` is trusted; (None, None) when there is
    none; (None, reason) when it is ignored. ``identity(prefix_len)`` is the ledger's, with
    the record's prefix length. At most ``max_blocks`` entries are accepted (the ledger's
    own block count): a longer file is refused by its size, before it is read."""
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return None, None
    except NotRegularFile:
        return None, "is not a regular file"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    try:
        if st.st_uid != os.geteuid():
            return None, "belongs to another user"
        if st.st_mode & 0o022:
            return None, "may be written by other users"
        limit = HEADER_BYTES + ENTRY.itemsize * max_blocks + DIGEST_BYTES
        if st.st_size > limit:
            return None, (f"is {st.st_size} bytes, more than a record of this ledger's {max_blocks} blocks "
                          f"can be ({limit})")
        data = _read_exactly(fd, st.st_size)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    finally:
        os.close(fd)
    if len(data) < HEADER_BYTES + DIGEST_BYTES or data[:8] != MAGIC:
        return None, "is not a capsem-core verification record"
    magic, version, entry_size, b_dev, b_ino, d_dev, d_ino, p_len, p_hash, count = _HEADER.unpack_from(data)
    if version != VERSION:
        return None, f"has version {version}, not {VERSION}"
    if _blake3.digest(data[:-DIGEST_BYTES]) != data[-DIGEST_BYTES:]:
        return None, "is damaged (its checksum does not match)"
    if entry_size != ENTRY.itemsize:
        return None, f"is damaged (entries of {entry_size} bytes, not {ENTRY.itemsize})"
    if count > max_blocks:
        return None, f"claims {count} blocks, more than the ledger's {max_blocks}"
    if HEADER_BYTES + count * ENTRY.itemsize + DIGEST_BYTES != len(data):
        return None, f"is damaged (its length does not hold its {count} blocks)"
    recorded = Identity(b_dev, b_ino, d_dev, d_ino, p_len, p_hash)
    why = identity(p_len).differs_from(recorded)
    if why is not None:
        return None, f"is of another file ({why})"
    entries = np.frombuffer(data, dtype=ENTRY, count=count, offset=HEADER_BYTES).copy()
    off = entries["block_offset"]
    if count and (off[0] < FILE_HEADER_BYTES or np.any(off[1:] <= off[:-1]) or np.any(entries["disk_len"] < 0)
                  or np.any(entries["raw_len"] < 0) or np.any(entries["bodies"] < 0)):
        return None, "is damaged (its blocks are out of order or out of range)"
    when = entries["verified_at"]
    if count and (np.any(when < 0) or np.any(when > LATEST_VERIFIED_AT)):
        # A time no clock gives: shown as a date it cannot be, and ``now - verified_at``
        # would wrap past int64 and make a block verified "long ago" look recent to --max-age.
        return None, "is damaged (a verification time is out of range)"
    return Record(recorded, entries), None


def _read_exactly(fd: int, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def encode(identity: Identity, entries: Entries) -> bytes:
    """The record's bytes (header, entries, digest)."""
    entries = np.ascontiguousarray(entries, dtype=ENTRY)
    head = _HEADER.pack(MAGIC, VERSION, ENTRY.itemsize, identity.bodies_dev, identity.bodies_ino,
                        identity.db_dev, identity.db_ino, identity.prefix_len, identity.prefix_hash, len(entries))
    body = head + entries.tobytes()
    return body + _blake3.digest(body)


STALE_TEMPORARY_S = 3600


def _remove_stale_temporaries(dir_fd: int) -> None:
    """A process killed between creating its temporary and renaming it (SIGKILL, power loss)
    leaves ``.NAME.record.part-PID`` behind; it is never read as a record (not a record's
    name), and is removed here once it is an hour old (a younger one may be another check's,
    about to be renamed)."""
    now = time.time()
    for name in os.listdir(dir_fd):
        if not (name.startswith(".") and ".record" + PART_SUFFIX in name):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TEMPORARY_S:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def _never_made(directory: Path) -> Path | None:
    """What ``save`` never creates above the default record directory: the home, or
    XDG_CACHE_HOME's parent (the cache base itself may be made, as the XDG rules say). None
    for a directory named by CAPSEM_CORE_VERIFIED_DIR or the caller: it is made as given."""
    if directory == record_dir() and not os.environ.get(RECORD_DIR_ENV):
        return directory.parent.parent.parent
    return None


def save(path: Path, identity: Identity, entries: Entries) -> None:
    """Write the record through the output-path policy (``outputs.write_file_at``): its
    directory (0700, in the user's cache) made when missing (never a missing home above it:
    with HOME=/nonexistent nothing is created), a temporary file (0600) beside it written and
    fsynced, renamed over the old record (a regular file only), the directory fsynced.
    OSError or LedgerError when it cannot be written; the old record is then left as it was."""
    data = encode(identity, entries)
    directory = path.parent
    above = _never_made(directory)
    if above is not None and not above.is_dir():
        raise LedgerError(f"{above} is not a directory, and the record's directory is not made under it", directory)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileExistsError, NotADirectoryError):
        raise LedgerError("the verification record directory is not a directory", directory) from None
    try:
        _remove_stale_temporaries(dir_fd)
        write_file_at(dir_fd, path.name, data, directory, mode=0o600, durable=True)
    finally:
        os.close(dir_fd)


__all__ = ["ENTRY", "HEADER_BYTES", "IDENTITY_PREFIX_BYTES", "MAGIC", "RECORD_DIR_ENV", "VERSION", "Identity",
           "Record", "encode", "identity_of", "load", "record_dir", "record_path", "save"]
