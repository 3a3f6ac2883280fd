"""How much memory this process may still fill: the one owner of that policy.

What a check reads ahead into the page cache is sized from here (``snapshot.read_ahead_budget``).
The room is what the system reports available (Linux's MemAvailable, else the free pages),
narrowed by every memory cgroup limit above the process: in a container ``/proc/meminfo``
shows the host's memory, while the container's limit is what its page cache and its anonymous
memory are charged against. A cgroup's room is its limit less its anonymous memory (what the
kernel cannot drop to make room; its page cache can be). cgroup v2 (``memory.max``,
``memory.stat``'s ``anon``) and v1 (``memory.limit_in_bytes``, ``memory.stat``'s
``total_rss``) are both read; a file that is missing or unreadable narrows nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as a huge number (the largest page-aligned signed 64-bit value).
_V1_UNLIMITED = 1 << 62
# The files read here are a few lines; more than this is not one of them.
_MAX_READ = 64 << 10


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(_MAX_READ)
    except OSError:
        return None


def _stat_value(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def system_available(proc: Path = PROC) -> int | None:
    """The memory the system reports available, in bytes (None where it says nothing)."""
    text = _read(proc / "meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_dirs(proc: Path, root: Path) -> tuple[list[Path], bool] | None:
    """The directories of this process's memory cgroup and every cgroup above it (deepest
    first), and whether they are v1's; None when the process names none."""
    text = _read(proc / "self" / "cgroup")
    if text is None:
        return None
    v1: str | None = None
    v2: str | None = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif hierarchy == "0" and controllers == "":
            v2 = path
    chosen, base = (v1, root / "memory") if v1 is not None else (v2, root)
    if chosen is None or not chosen.startswith("/"):
        return None
    parts = [p for p in chosen.split("/") if p and p not in (".", "..")]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)], v1 is not None


def cgroup_room(proc: Path = PROC, root: Path = CGROUP_ROOT) -> int | None:
    """The least room any memory cgroup above this process leaves (its limit less its
    anonymous memory), in bytes; None when no limit applies or none can be read."""
    found = _cgroup_dirs(proc, root)
    if found is None:
        return None
    dirs, v1 = found
    rooms = []
    for d in dirs:
        text = _read(d / ("memory.limit_in_bytes" if v1 else "memory.max"))
        if text is None or not text.strip().isdigit():   # missing, or v2's "max"
            continue
        limit = int(text)
        if v1 and limit >= _V1_UNLIMITED:
            continue
        stat = _read(d / "memory.stat")
        anon = _stat_value(stat, "total_rss" if v1 else "anon")
        if anon is None and v1:
            anon = _stat_value(stat, "rss")
        rooms.append(max(0, limit - (anon or 0)))
    return min(rooms) if rooms else None


def room(proc: Path = PROC, root: Path = CGROUP_ROOT) -> int | None:
    """The memory this process may still fill, in bytes: the system's available memory,
    narrowed by its cgroups' room; None where neither can be read."""
    known = [x for x in (system_available(proc), cgroup_room(proc, root)) if x is not None]
    return min(known) if known else None


__all__ = ["CGROUP_ROOT", "PROC", "cgroup_room", "room", "system_available"]
