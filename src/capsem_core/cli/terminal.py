"""Terminal output policy: the one sanitizer, the colour rule, styles and tables.

Everything the commands print to a terminal is shaped here: whether colour is wanted
(:func:`colour_wanted`, the one ``NO_COLOR`` rule), the ANSI styles (:class:`Style`, the
only escape sequences our output ever contains), aligned tables (:func:`render_table`), the
sanitizer for strings that came from a ledger or main.db (:func:`sanitize`) and what the
standard streams do with a character their encoding cannot hold (:func:`escape_unencodable`).

Bodies, paths, tool names, domains and most other strings in a ledger are chosen by an
agent's counterparty. Printed verbatim they could drive the user's terminal (OSC 8 links,
cursor movement, a carriage return that overwrites a verdict, bidi overrides that reorder
what is read). Everything such a value contributes to text meant for a terminal goes
through :func:`sanitize`; ``--json`` output keeps the exact values instead.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

__all__ = ["Style", "cell", "colour_wanted", "escape_unencodable", "render_table", "sanitize"]


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


# Unicode's default-ignorable code points that Python calls printable: invisible, yet a
# domain holding one reads as another (combining grapheme joiner, Hangul fillers, Khmer
# inherent vowels, Mongolian and other variation selectors).
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
                        "\U000e0100-\U000e01ef]")


def sanitize(value: object) -> str:
    """``value`` as text that a terminal shows but never acts on.

    Every character Python does not call printable — C0 and C1 controls (ESC, CR, BEL,
    NEL ...), DEL, format characters (bidi overrides and isolates, zero-width joiners,
    the BOM), line and paragraph separators, surrogates, private-use and unassigned code
    points, and spaces other than U+0020 — and every invisible one it does (variation
    selectors, fillers: ``_INVISIBLE``) is shown as a visible escape (``\\x1b``,
    ``\\u202e``). ``None`` is the empty string; other objects go through ``str`` first.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and _INVISIBLE.search(text) is None:
        return text
    return "".join(ch if ch.isprintable() and _INVISIBLE.match(ch) is None else _escape(ch) for ch in text)


def colour_wanted(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything but the empty
    string (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Style:
    """ANSI styling that is a no-op when colour is off."""

    CODES = {"bold": "\033[1m", "dim": "\033[2m", "cyan": "\033[36m", "green": "\033[32m",
             "yellow": "\033[33m", "red": "\033[31m", "bold_cyan": "\033[1m\033[36m"}
    RESET = "\033[0m"

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, style: str, text: str) -> str:
        if not self.enabled or not text:
            return text
        return f"{self.CODES[style]}{text}{self.RESET}"


def cell(value: object, limit: int | None = None) -> str:
    """One table cell: sanitized first, so widths count what is shown and a cut at ``limit``
    characters never splits an escape."""
    text = sanitize(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def render_table(out: list[str], s: Style, columns: Sequence[str], rows: Sequence[Sequence[object]],
                 limit: int | None = None) -> None:
    """Append an aligned, indented table (bold header, dim rule and rows, a blank line after)
    to ``out``; ``(empty)`` when there are no rows."""
    if not rows:
        out.append(s("dim", "  (empty)"))
        out.append("")
        return
    cells = [[cell(v, limit) for v in row] for row in rows]
    headers = [sanitize(h) for h in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out.append(s("bold", "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths))))
    out.append(s("dim", "  " + "  ".join("-" * w for w in widths)))
    for row in cells:
        out.append(s("dim", "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths))))
    out.append("")


def escape_unencodable() -> Callable[[], None]:
    """Make stdout and stderr write a character their encoding cannot hold as an escape
    (``\\xe9``, the form :func:`sanitize` uses) instead of failing: a ledger's strings are any
    Unicode, a terminal's encoding may be ASCII (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``), and
    a printable character is not the sanitizer's to escape. Returns what puts them back."""
    changed: list[tuple[io.TextIOWrapper, str]] = []
    for stream in (sys.stdout, sys.stderr):
        # "surrogateescape" too (the C locale's): it fails on a printable character as
        # "strict" does, and sanitized text holds no surrogates for it to keep.
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
            previous = stream.errors
            if _set_errors(stream, "backslashreplace"):
                changed.append((stream, previous))

    def restore() -> None:
        for stream, errors in changed:
            _set_errors(stream, errors)
    return restore


def _set_errors(stream: io.TextIOWrapper, errors: str) -> bool:
    try:
        stream.reconfigure(errors=errors)   # flushes first: what was written keeps its handler
    except (OSError, ValueError):   # closed, or its reader gone
        return False
    return True
