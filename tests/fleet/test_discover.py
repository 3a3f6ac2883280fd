"""Finding a fleet's ledgers: a home's run directory, trees, links, loops and depth."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capsem_core.fleet import discover, discover_home, discover_tree
from capsem_core.sample import write_sample_home, write_sample_ledger


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("discover")
    write_sample_home(root / "home", sessions=6, seed=5, bodies=40)
    return root / "home"


def test_a_homes_ephemeral_and_persistent_ledgers_are_found_with_their_ids_and_names(home: Path) -> None:
    summary_dirs = sorted((home / "run" / "sessions").iterdir()) + sorted((home / "run" / "persistent").iterdir())
    found = discover_home(home)
    assert [x.directory for x in found.ledgers] == summary_dirs
    persistent = [x for x in found.ledgers if x.kind == "persistent"]
    assert persistent and all(x.name == x.directory.name and x.session_id for x in persistent)
    # A persistent VM's label names it and its id, as check's session list does.
    assert persistent[0].label == f"{persistent[0].name} ({persistent[0].session_id})"
    ephemeral = [x for x in found.ledgers if x.kind == "ephemeral"]
    assert all(x.session_id == x.directory.name and x.name is None for x in ephemeral)
    assert all(x.size > x.archive_size > 0 for x in found.ledgers)
    assert found.notes == []


def test_a_home_met_inside_a_tree_keeps_its_ids_and_names_and_each_ledger_is_found_once(home: Path) -> None:
    by_home = discover_home(home).ledgers
    both = discover([home.parent], home=home).ledgers
    assert [(x.directory, x.kind, x.session_id, x.name) for x in both] == \
        [(x.directory, x.kind, x.session_id, x.name) for x in by_home]


def test_a_tree_is_searched_without_following_links_so_a_loop_ends(tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / "archive" / "machine-a" / "s1", bodies=20)
    (tmp_path / "archive" / "machine-a" / "loop").symlink_to(tmp_path / "archive")
    os.symlink(tmp_path / "archive" / "machine-a" / "s1", tmp_path / "archive" / "s1-again")
    found = discover_tree(tmp_path / "archive")
    assert [x.directory.name for x in found.ledgers] == ["s1"]
    assert found.ledgers[0].kind == "directory" and found.ledgers[0].label == "s1"
    assert any("symbolic link not followed" in n for n in found.notes)


def test_the_search_stops_at_its_depth_and_counts_what_it_did_not_search(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c" / "d"
    write_sample_ledger(deep / "s", bodies=20)
    write_sample_ledger(tmp_path / "a" / "near", bodies=20)
    found = discover_tree(tmp_path, max_depth=3)
    assert [x.directory.name for x in found.ledgers] == ["near"]
    assert [(u.path, u.status, u.fails) for u in found.unchecked] == [(tmp_path / "a" / "b" / "c", "not searched", True)]
    assert "deeper than 3 levels" in found.unchecked[0].reason
    assert [x.directory.name for x in discover_tree(tmp_path).ledgers] == ["s", "near"]


def test_a_session_db_or_a_ledger_directory_given_directly_is_one_ledger(tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / "one", bodies=20)
    assert [x.directory for x in discover_tree(tmp_path / "one" / "session.db").ledgers] == [tmp_path / "one"]
    assert [x.directory for x in discover_tree(tmp_path / "one").ledgers] == [tmp_path / "one"]
    missing = discover_tree(tmp_path / "nowhere")
    assert missing.ledgers == [] and [(u.status, u.given) for u in missing.unchecked] == [("missing", True)]


def test_a_session_directory_that_is_a_link_is_listed_so_its_check_refuses_it(home: Path, tmp_path: Path) -> None:
    write_sample_ledger(tmp_path / "elsewhere", bodies=20)
    link = home / "run" / "sessions" / "linked-session"
    link.symlink_to(tmp_path / "elsewhere")
    try:
        found = discover_home(home)
        assert link in [x.directory for x in found.ledgers]
    finally:
        link.unlink()


def test_relative_paths_and_a_relative_home_are_found_as_absolute_paths(home: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A task names its ledger to a worker, whose working directory (with Dask, on another
    machine) is not this one's: a relative name there reached another ledger, or none."""
    monkeypatch.chdir(home.parent)
    by_path = discover([home.name])
    monkeypatch.setenv("CAPSEM_HOME", home.name)
    by_home = discover(home=True)
    assert by_path.ledgers and by_home.ledgers
    for ledger in [*by_path.ledgers, *by_home.ledgers]:
        assert ledger.directory.is_absolute() and ledger.db_path.is_absolute()
        assert ledger.main_db is None or ledger.main_db.is_absolute()


def test_a_directory_reached_two_ways_is_counted_once_as_its_ledgers_are(tmp_path: Path) -> None:
    write_sample_home(tmp_path / "home", sessions=3, seed=5, bodies=20)
    (tmp_path / "home" / "run" / "sessions" / "setting-up").mkdir()   # neither half of a ledger yet
    once = discover(home=tmp_path / "home")
    twice = discover([tmp_path / "home", tmp_path / "home" / "run"], home=tmp_path / "home")
    assert [u.path.name for u in once.unchecked] == ["setting-up"]
    assert [(u.path.name, u.status) for u in twice.unchecked] == [(u.path.name, u.status) for u in once.unchecked]
    assert len(twice.ledgers) == len(once.ledgers)


def test_a_home_in_a_tree_is_not_read_through_a_link_as_its_sessions_or_its_run(tmp_path: Path) -> None:
    """The tree walk follows no link, and a home it meets keeps to that: a ``run/sessions``
    (or a ``run``) that is a link to ledgers elsewhere lists none of them, and says why."""
    write_sample_home(tmp_path / "tree" / "home", sessions=2, seed=6, bodies=20)
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "tree" / "home" / "run" / "sessions").rename(elsewhere)
    (tmp_path / "tree" / "home" / "run" / "sessions").symlink_to(elsewhere)
    found = discover_tree(tmp_path / "tree")
    assert not [x for x in found.ledgers if elsewhere in x.directory.parents or x.kind == "ephemeral"]
    assert any("run/sessions: a symbolic link, not followed" in n for n in found.notes)
    persistent = [x for x in found.ledgers if x.kind == "persistent"]
    assert persistent and all(x.session_id for x in persistent)   # the real part of the home is read
    run = tmp_path / "tree" / "home" / "run"
    run.rename(tmp_path / "run-elsewhere")
    run.symlink_to(tmp_path / "run-elsewhere")
    found = discover_tree(tmp_path / "tree")
    assert found.ledgers == [] and any("symbolic link not followed" in n for n in found.notes)
