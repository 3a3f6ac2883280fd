"""The sizes of a page of events and how often a follower polls.

Apart from ``reader`` (which loads numpy and the column scanner) so that the command line
can build ``events``'s arguments without it; ``reader`` re-exports them.
"""

from __future__ import annotations

MIN_LIMIT = 1
MAX_LIMIT = 1000
# A page also ends once the values it delivers pass this many bytes (after its first event),
# and no single value may be larger: a hostile ledger's huge rows cannot size the memory. A
# page ends before a row holding a larger value; the page that would start with it fails.
PAGE_BYTES = 32 << 20
ROW_BYTES = 32 << 20
DEFAULT_POLL_S = 0.05


def clamp_limit(limit: int) -> int:
    """A page's size: ``limit`` clamped to 1..1000 (TypeError for a non-integer)."""
    if type(limit) is not int:
        raise TypeError(f"limit must be an integer, not {type(limit).__name__}")
    return min(max(limit, MIN_LIMIT), MAX_LIMIT)


__all__ = ["DEFAULT_POLL_S", "MAX_LIMIT", "MIN_LIMIT", "PAGE_BYTES", "ROW_BYTES", "clamp_limit"]
