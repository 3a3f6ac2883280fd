"""The column shapes the v2 DDL repeats (event ids, BLAKE3 hashes, credential references) and
``one_of``, which spells a vocabulary as an SQL ``IN`` list.

They are text spliced into the DDL, so the CREATE statements read as the reference does
while each shape is written once.
"""

from __future__ import annotations

from collections.abc import Iterable


def one_of(values: Iterable[str]) -> str:
    """``('a', 'b', ...)``: the values as an SQL ``IN`` list (none of them holds a quote)."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# An event id is 6 random bytes as 12 lowercase hex digits; the NOT GLOB test rejects any
# character outside 0-9a-f, so every one of the 12 is checked.
HEX12 = "length({c}) = 12 AND {c} NOT GLOB '*[^0-9a-f]*'"
EVENT_ID = f"event_id TEXT NOT NULL DEFAULT (lower(hex(randomblob(6)))) CHECK ({HEX12.format(c='event_id')})"
EVENT_ID_SUPPLIED = f"event_id TEXT NOT NULL CHECK ({HEX12.format(c='event_id')})"
# Hash-shaped text: exact length, prefix, first digit lowercase hex (GLOB ends in '*').
BLAKE3 = "length({c}) = 71 AND {c} GLOB 'blake3:[0-9a-f]*'"
CREDENTIAL_REF = ("credential_ref TEXT CHECK (credential_ref IS NULL OR "
                  "(length(credential_ref) = 82 AND credential_ref GLOB 'credential:blake3:[0-9a-f]*'))")
