"""How sample values become row columns and JSON bytes: the one compact JSON encoder, JSON
string literals, the caps Capsem puts on preview columns and guest output, and fitting text
into a byte range.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from capsem_core.sample.units import MIB

# The guest cuts exec output to 1 KiB before it reaches the ledger (facts §1.3).
EXEC_OUTPUT_CAP = 1024
# Display columns (*_preview) are capped at 2 KiB.
PREVIEW_CAP = 2048
# A body the writer would cut (10 MiB) is never generated: histories are compacted first.
MAX_GENERATED_BODY = 8 * MIB

# One encoder, made once: json.dumps with non-default options builds a new encoder per call.
jdump: Callable[[object], str] = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# A JSON string literal (quotes included) of a str.
jstr: Callable[[str], str] = json.encoder.encode_basestring


def cap(s: str | None, n: int = PREVIEW_CAP) -> str | None:
    """``s`` cut to ``n`` characters (a preview column); None stays None."""
    if s is None:
        return None
    return s if len(s) <= n else s[:n]


def cap_bytes_text(b: bytes, n: int = PREVIEW_CAP) -> str:
    """The first ``n`` bytes of a body as text, for a preview column."""
    return b[:n].decode("utf-8", "replace")


def textual(content_type: str | None) -> bool:
    """Whether a body of this type gets a text preview (archives and packs do not)."""
    return content_type is not None and not content_type.startswith(("application/octet-stream", "application/x-git"))


def fit(text: str, lo: int, hi: int, filler: str) -> str:
    """Pad with ``filler`` (repeated) or cut so the UTF-8 length is within [lo, hi]."""
    b = text.encode()
    if len(b) > hi:
        return b[:hi].decode("utf-8", "ignore")
    while len(b) < lo:
        b += (" " + filler).encode()
    return b[:hi].decode("utf-8", "ignore")

