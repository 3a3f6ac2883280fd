"""Terminal output policy: the one sanitizer for strings that came from a ledger or main.db.

Bodies, paths, tool names, domains and most other strings in a ledger are chosen by an
agent's counterparty. Printed verbatim they could drive the user's terminal (OSC 8 links,
cursor movement, a carriage return that overwrites a verdict, bidi overrides that reorder
what is read). Everything such a value contributes to text meant for a terminal goes
through :func:`sanitize`; ``--json`` output keeps the exact values instead.
"""

from __future__ import annotations

__all__ = ["sanitize"]


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def sanitize(value: object) -> str:
    """``value`` as text that a terminal shows but never acts on.

    Every character Python does not call printable — C0 and C1 controls (ESC, CR, BEL,
    NEL ...), DEL, format characters (bidi overrides and isolates, zero-width joiners,
    the BOM), line and paragraph separators, surrogates, private-use and unassigned code
    points, and spaces other than U+0020 — is shown as a visible escape (``\\x1b``,
    ``\\u202e``). ``None`` is the empty string; other objects go through ``str`` first.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
