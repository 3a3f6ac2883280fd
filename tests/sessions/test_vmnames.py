"""The VM-name sidecar: links written whole under the lock, and nothing left by an interrupt."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from capsem_core.sessions import vmnames


def test_links_are_written_private_and_read_back(tmp_path: Path) -> None:
    main_db = tmp_path / "sessions" / "main.db"
    vmnames.link_name(main_db, "co-work1", "id-1")
    vmnames.link_name(main_db, "co-work2", "id-2")
    vmnames.link_name(main_db, "same", "same")   # a name equal to its id needs no link
    assert vmnames.read_links(main_db) == {"co-work1": "id-1", "co-work2": "id-2"}
    sidecar = vmnames.sidecar_path(main_db)
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600


def test_an_interrupt_while_the_links_are_written_leaves_the_old_links_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main_db = tmp_path / "sessions" / "main.db"
    vmnames.link_name(main_db, "co-work1", "id-1")
    before = sorted(p.name for p in main_db.parent.iterdir())

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vmnames.link_name(main_db, "co-work2", "id-2")
    monkeypatch.undo()
    assert vmnames.read_links(main_db) == {"co-work1": "id-1"}
    assert sorted(p.name for p in main_db.parent.iterdir()) == before
