"""The cursor: its text round-trips, any edit is refused, and it resumes only on its own ledger
(or a copy of it), never past what that ledger holds."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from capsem_core.errors import CursorError, LedgerError
from capsem_core.events import EVENT_TABLE_NAMES, Mark
from capsem_core.events import cursor as C
from capsem_core.ledger import Ledger
from tests.events.ledgers import write_mixed


def test_a_cursors_text_holds_its_marks_exactly() -> None:
    marks = {"net_events": Mark(1, b"12345678"), "transport_events": Mark(2**63 - 1, None),
             "fs_events": Mark(300, b"\x00" * 8)}
    text = C.encode(marks)
    assert text.startswith("ev1.") and text.isascii() and len(text) < C.MAX_CURSOR_CHARS
    assert C.decode(text) == marks
    assert C.decode(C.encode({})) == {}
    assert C.decode(C.encode({"dns_events": Mark(0, None)})) == {}  # a table at its start is left out


def test_every_table_marked_still_fits_well_inside_the_length_bound() -> None:
    full = C.encode({name: Mark(2**63 - 1, b"\xff" * 8) for name in EVENT_TABLE_NAMES})
    assert len(full) * 2 < C.MAX_CURSOR_CHARS


def test_any_edited_character_of_a_cursor_is_refused() -> None:
    text = C.encode({"net_events": Mark(41, b"abcdefgh"), "fs_events": Mark(7, None)})
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i in range(len(C.PREFIX), len(text)):
        other = alphabet[(alphabet.index(text[i]) + 1) % len(alphabet)]
        edited = text[:i] + other + text[i + 1:]
        with pytest.raises(CursorError, match="integrity check|base64|cut short|edited"):
            C.decode(edited)


@pytest.mark.parametrize("text, why", [
    ("", "starts with 'ev1.'"),
    ("start ", "starts with 'ev1.'"),
    ("ev2.AQ", "version '2'"),
    ("ev1.", "cut short"),
    ("ev1.AQ", "cut short"),
    ("ev1.!!!!", "base64"),
    ("ev1.AQ==AQ", "base64"),
    ("ev1." + "A" * 2000, "more than any cursor"),
    ("ev1.\x1b[2J", "base64"),
])
def test_text_that_is_not_a_cursor_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(CursorError, match="not a usable events cursor") as caught:
        C.decode(text, "/x/session.db")
    assert why in str(caught.value) and caught.value.path == Path("/x/session.db")


def _signed(payload: bytes) -> str:
    raw = payload + C._check(payload)
    return C.PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize("payload, why", [
    (bytes([2]), "version 2"),
    (bytes([1, 13, 1]), "out of order or unknown"),
    (bytes([1, 3, 1, 2, 1]), "out of order or unknown"),
    (bytes([1, 0, 0x80]), "cut short or too long"),
    (bytes([1, 0]) + b"\xff" * 9 + b"\x01", "cut short or too long"),
    (bytes([1, 0, 0]), "not a rowid"),
    (bytes([1, 0x80, 1, 1, 2]), "anchor is cut short"),
])
def test_a_well_signed_cursor_with_a_malformed_body_is_refused(payload: bytes, why: str) -> None:
    with pytest.raises(CursorError, match=why):
        C.decode(_signed(payload))


def test_a_cursor_resumes_on_a_copy_of_its_ledger_but_not_on_another_ledger(tmp_path: Path) -> None:
    write_mixed(tmp_path / "a", 90)
    write_mixed(tmp_path / "b", 90, salt=1)  # the same shape, other event ids
    with Ledger(tmp_path / "a") as a:
        page = a.events(limit=10)
        copy = a.copy_to(tmp_path / "copy")
    with copy:
        assert copy.events(after=page.cursor, limit=5).events == a_events_after(tmp_path / "a", page.cursor, 5)
    with Ledger(tmp_path / "b") as b:
        with pytest.raises(CursorError, match="another ledger") as caught:
            b.events(after=page.cursor)
        assert caught.value.path == tmp_path / "b" / "session.db"
        b.events(after=C.encode({}))  # the start of every table names no row: any ledger takes it


def test_a_cursor_on_a_row_deleted_since_says_so_not_that_it_is_another_ledgers(tmp_path: Path) -> None:
    import sqlite3

    write_mixed(tmp_path / "a", 30)
    with Ledger(tmp_path / "a") as a:
        page = a.events(limit=3)
    last = page.events[-1]
    conn = sqlite3.connect(tmp_path / "a" / "session.db")
    with conn:
        conn.execute(f"DELETE FROM {last.table} WHERE id = ?", (last.id,))
    conn.close()
    with Ledger(tmp_path / "a") as a, pytest.raises(CursorError, match="does not hold: the row was deleted since"):
        a.events(after=page.cursor)


def a_events_after(directory: Path, cursor: str, limit: int) -> list[object]:
    with Ledger(directory) as ledger:
        return list(ledger.events(after=cursor, limit=limit).events)


def test_a_cursor_ahead_of_the_ledger_is_refused(tmp_path: Path) -> None:
    write_mixed(tmp_path / "a", 30)
    with Ledger(tmp_path / "a") as a:
        a.copy_to(tmp_path / "older").close()
    write_mixed(tmp_path / "a", 30, first=30)
    with Ledger(tmp_path / "a") as a:
        latest = a.events(after="latest").cursor
    with Ledger(tmp_path / "older") as older, pytest.raises(CursorError, match="ahead|last row there is 10"):
        older.events(after=latest)


def test_a_signed_cursor_naming_rows_the_ledger_does_not_have_is_refused(tmp_path: Path) -> None:
    write_mixed(tmp_path, 30)
    with Ledger(tmp_path) as ledger:
        with pytest.raises(CursorError, match="last row there is 10"):
            ledger.events(after=C.encode({"net_events": Mark(11, None)}))
        with pytest.raises(CursorError, match="another ledger"):
            ledger.events(after=C.encode({"net_events": Mark(5, b"forged!!")}))
        with pytest.raises(CursorError, match="another ledger"):
            ledger.events(after=C.encode({"net_events": Mark(5, None)}))


def test_a_cursor_error_is_a_ledger_error_and_after_must_be_text(tmp_path: Path) -> None:
    write_mixed(tmp_path, 3)
    assert issubclass(CursorError, LedgerError)
    with Ledger(tmp_path) as ledger, pytest.raises(TypeError, match="after must be"):
        ledger.events(after=None)  # type: ignore[arg-type]
    # follow checks ``after`` when called, as events does (a list failed deep inside, an
    # AttributeError naming nothing).
    for after in ([], b"start", None):
        with Ledger(tmp_path) as ledger, pytest.raises(TypeError, match="after must be"):
            ledger.follow(after=after, stop=lambda: True)  # type: ignore[arg-type]
