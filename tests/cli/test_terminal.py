"""The one terminal sanitizer: hostile ledger strings are shown, never executed."""

from __future__ import annotations

import io

from hypothesis import given, strategies as st

from capsem_core.cli.terminal import sanitize

HOSTILE = [
    ("\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07", "\\x1b]8;;https://evil.example/\\x07click\\x1b]8;;\\x07"),
    ("ok\rDAMAGED", "ok\\x0dDAMAGED"),
    ("abc\u202edcba", "abc\\u202edcba"),
    ("a\u2066b\u2069", "a\\u2066b\\u2069"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("line\u2028sep", "line\\u2028sep"),
    ("nel\x85c1\x9b", "nel\\x85c1\\x9b"),
    ("tab\tnew\nline", "tab\\x09new\\x0aline"),
    ("del\x7f", "del\\x7f"),
    ("bom\ufeff", "bom\\ufeff"),
    ("surrogate\udcff", "surrogate\\udcff"),
    ("tag\U000e0041", "tag\\U000e0041"),
    # Invisible, though Python calls them printable: a domain holding one reads as another.
    ("paypal.com\ufe0f.evil", "paypal.com\\ufe0f.evil"),
    ("a\u034fb\u115fc\u1160d\u3164e\uffa0f", "a\\u034fb\\u115fc\\u1160d\\u3164e\\uffa0f"),
    ("k\u17b4\u17b5m\u180b\u180fv\U000e0100", "k\\u17b4\\u17b5m\\u180b\\u180fv\\U000e0100"),
]
# Unicode's default-ignorable code points that str.isprintable() accepts.
INVISIBLE = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), 0x3164, *range(0xFE00, 0xFE10), 0xFFA0,
             *range(0xE0100, 0xE01F0)}


def test_hostile_strings_are_shown_as_visible_escapes() -> None:
    for raw, shown in HOSTILE:
        assert sanitize(raw) == shown


def test_plain_text_and_other_scripts_pass_unchanged() -> None:
    for text in ("api.anthropic.com", "/home/u/ファイル.txt", "naïve café", "emoji 🎉", ""):
        assert sanitize(text) == text


def test_none_is_empty_and_numbers_are_their_text() -> None:
    assert sanitize(None) == ""
    assert sanitize(42) == "42"
    assert sanitize(1.5) == "1.5"


@given(st.text())
def test_no_sanitized_text_holds_a_character_a_terminal_could_act_on(text: str) -> None:
    out = sanitize(text)
    assert out.isprintable() and not any(ord(ch) in INVISIBLE for ch in out)
    assert "\x1b" not in out and "\r" not in out


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")).filter(
    lambda ch: ord(ch) not in INVISIBLE)))
def test_printable_text_is_never_altered(text: str) -> None:
    assert sanitize(text) == text


def test_no_color_set_to_anything_but_empty_turns_colour_off_even_on_a_terminal(monkeypatch) -> None:
    from capsem_core.cli.terminal import colour_wanted

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour_wanted(Tty()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert colour_wanted(Tty()) is False
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: an empty value does not count
    assert colour_wanted(Tty()) is True
    assert colour_wanted(io.StringIO()) is False  # not a terminal


def test_a_table_aligns_escaped_cells_and_cuts_long_ones_without_splitting_an_escape() -> None:
    from capsem_core.cli.terminal import Style, render_table

    out: list[str] = []
    render_table(out, Style(False), ["name", "n"], [["a\x1bb", 1], ["x" * 80, 22]], limit=10)
    assert out[0] == "  name        n "
    assert out[2] == "  a\\x1bb      1 "
    assert out[3] == "  xxxxxxx...  22"
    assert out[-1] == ""
