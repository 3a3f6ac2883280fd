"""Byte units and the size arguments a sample is given (``64K``, ``1.5GiB``)."""

from __future__ import annotations

import re

KIB = 1024
MIB = 1024 * 1024


MAX_SIZE = 1 << 50


def parse_size(text: str) -> int:
    """A byte count like ``1000``, ``64K``, ``64M``, ``1G``, ``1.5GiB`` (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 1000, 64K, 64M, 1G)")
    scale = {"": 1, "k": KIB, "m": MIB, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    # Bounded before float(): a long run of digits would be inf, and inf no int.
    if len(m.group(1)) > 24 or float(m.group(1)) * scale > MAX_SIZE:
        raise ValueError(f"a size must be at most 1P (2**50 bytes): {text[:40]!r}")
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise ValueError(f"a size must be positive: {text!r}")
    return value
