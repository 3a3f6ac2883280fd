"""The file names ``export DIR`` gives the bodies it writes: ledger strings reduced to a safe
charset and the body's BLAKE3 last, so a name is never hidden, relative or a traversal, and two
names that reduce alike collide only when their bytes are the same too. Where the files go,
and how they are written, is the output-path policy's (``capsem_core.outputs``)."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def safe_component(value: str | None, limit: int) -> str:
    """A ledger string as part of a file name: runs of anything but ASCII letters, digits,
    ``_`` and ``-`` become one ``_`` (no dot, slash, NUL or control character survives, so
    no name is hidden, relative or a traversal), cut to ``limit`` characters; "_" for
    empty or None."""
    return _UNSAFE.sub("_", value or "")[:limit] or "_"


_EXPORT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{1,40}\.[A-Za-z0-9_-]{1,24}\.[0-9a-f]{64}")


def is_export_name(name: str) -> bool:
    """Whether ``name`` has the form ``export_name`` gives a body's file."""
    return _EXPORT_NAME.fullmatch(name) is not None


def export_name(event_id: str | None, source_table: str | None, direction: str | None, digest_hex: str) -> str:
    """The file name an exported body takes: ``{event_id}.{table}.{direction}.{hash}`` with
    each ledger string made safe (``safe_component``) and the body's full BLAKE3 hex last,
    so two names that sanitize alike only collide when their bytes are the same too. At most
    64 + 40 + 24 + 64 + 3 characters, under every file system's 255."""
    if not re.fullmatch(r"[0-9a-f]{64}", digest_hex):
        raise ValueError("a body's digest is 64 lower-case hex digits")
    return ".".join((safe_component(event_id, 64), safe_component(source_table, 40),
                     safe_component(direction, 24), digest_hex))


__all__ = ["export_name", "is_export_name", "safe_component"]
