"""The link from a persistent VM's name to its session id, kept where Capsem never looks.

Capsem's main.db has no name column: a persistent VM's name is only its ledger directory,
``<run>/persistent/<name>/``, and Capsem's doctor finds it there by session id, i.e. it
assumes the directory name *is* the id. A VM whose name equals its id therefore needs
nothing. For a name that differs from its id, capsem-core keeps one small sidecar,
``$CAPSEM_HOME/sessions/capsem-core-vm-names.json``::

    {"format": "capsem-core-vm-names", "version": 1, "names": {"<name>": "<session id>", ...}}

It is capsem-core's own file (Capsem reads only ``main.db`` in that directory), written
atomically (a private 0600 temporary, fsync, rename) under an ``flock`` on a sibling lock
file, and read with a size bound. A damaged or oversized sidecar is ignored with a ``LedgerWarning``
(through ``warnings``: the command line shows it as one line): names are a convenience, and
every session stays reachable by its id.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from pathlib import Path

from capsem_core.errors import LedgerError, LedgerWarning
from capsem_core.outputs import write_file_at
from capsem_core.paths import VM_NAMES_FILE, VM_NAMES_LOCK_SUFFIX, open_regular
from capsem_core.sessions.home import session_word_problem

SIDECAR_NAME = VM_NAMES_FILE
SIDECAR_FORMAT = "capsem-core-vm-names"
SIDECAR_VERSION = 1
# About 3,900 links of two 128-character words, with the file's punctuation and indentation,
# fit inside this.
MAX_SIDECAR_BYTES = 1 << 20


def warn(message: str) -> None:
    """Say that (part of) the sidecar is ignored, as a LedgerWarning."""
    warnings.warn(message, LedgerWarning, stacklevel=3)


def sidecar_path(main_db: os.PathLike[str] | str) -> Path:
    """The sidecar next to ``main.db`` (``$CAPSEM_HOME/sessions/``)."""
    return Path(main_db).parent / SIDECAR_NAME


def _valid_word(word: object) -> bool:
    return session_word_problem(word) is None


def _parse(raw: bytes, path: Path) -> dict[str, str]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        warn(f"{path}: ignoring damaged VM name links (not JSON: {exc})")
        return {}
    except RecursionError:
        # A small file of nested brackets exhausts the decoder's stack: as damaged as any.
        warn(f"{path}: ignoring damaged VM name links (not JSON: nested too deeply)")
        return {}
    if (not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT
            or doc.get("version") != SIDECAR_VERSION or not isinstance(doc.get("names"), dict)):
        warn(f"{path}: ignoring VM name links: not a {SIDECAR_FORMAT} version {SIDECAR_VERSION} file")
        return {}
    names: dict[str, str] = {}
    skipped = 0
    for name, sid in doc["names"].items():
        if _valid_word(name) and _valid_word(sid) and name != sid:
            names[name] = sid
        else:
            skipped += 1
    if skipped:
        warn(f"{path}: ignoring {skipped} VM name link(s) that cannot name a session")
    return names


def read_links(main_db: os.PathLike[str] | str) -> dict[str, str]:
    """``{name: session id}`` from the sidecar; empty when it is missing or damaged."""
    path = sidecar_path(main_db)
    try:
        fd, _st = open_regular(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:   # NotRegularFile's says "not a regular file"
        warn(f"{path}: ignoring VM name links: {exc.strerror or exc}")
        return {}
    try:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_SIDECAR_BYTES + 1)
    except OSError as exc:
        warn(f"{path}: ignoring VM name links: {exc.strerror or exc}")
        return {}
    if len(raw) > MAX_SIDECAR_BYTES:
        warn(f"{path}: ignoring VM name links: larger than {MAX_SIDECAR_BYTES} bytes")
        return {}
    return _parse(raw, path)


def names_by_id(links: dict[str, str]) -> dict[str, str]:
    """``{session id: name}``; when two names point at one id the later entry wins."""
    return {sid: name for name, sid in links.items()}


def link_name(main_db: os.PathLike[str] | str, name: str, session_id: str) -> None:
    """Record that the persistent VM ``name`` is session ``session_id`` (a name equal to its
    id needs no link and is not written). Any older link of that name or that id is replaced."""
    if name == session_id:
        return
    path = sidecar_path(main_db)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(str(path) + VM_NAMES_LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise LedgerError(f"cannot lock the VM name links: {exc.strerror or exc}", path) from exc
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        links = {n: s for n, s in read_links(main_db).items() if n != name and s != session_id}
        links[name] = session_id
        body = json.dumps({"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "names": links},
                          indent=1, sort_keys=True).encode() + b"\n"
        if len(body) > MAX_SIDECAR_BYTES:
            raise LedgerError(f"too many VM name links to keep (over {MAX_SIDECAR_BYTES} bytes)", path)
        # Through the output-path policy's per-file rule: a temporary renamed in whole, removed
        # on any exception (an interrupt included), the file and the directory synced.
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_file_at(dir_fd, path.name, body, path.parent, mode=0o600, durable=True)
        except OSError as exc:
            raise LedgerError(f"cannot write the VM name links: {exc.strerror or exc}", path) from exc
        finally:
            os.close(dir_fd)
    finally:
        os.close(lock_fd)
