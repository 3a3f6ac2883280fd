"""The room a process may fill: the system's available memory, narrowed by every memory
cgroup above it (v2 and v1), read from real files laid out as /proc and /sys/fs/cgroup are."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsem_core import memory, snapshot

GiB = 1 << 30


def _proc(tmp_path: Path, cgroup: str, available_kib: int | None = 8 * (1 << 20)) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    if available_kib is not None:
        (proc / "meminfo").write_text(f"MemTotal:       99999999 kB\nMemAvailable:   {available_kib} kB\n")
    return proc


def _v2(root: Path, path: str, limit: str, anon: int) -> None:
    d = root.joinpath(*[p for p in path.split("/") if p])
    d.mkdir(parents=True, exist_ok=True)
    (d / "memory.max").write_text(limit + "\n")
    (d / "memory.stat").write_text(f"anon {anon}\nfile 123456789\n")


def test_without_a_cgroup_limit_the_room_is_what_the_system_has_available(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/user.slice/session.scope\n")
    root = tmp_path / "cgroup"
    _v2(root, "/user.slice/session.scope", "max", 10)
    assert memory.cgroup_room(proc, root) is None
    assert memory.room(proc, root) == 8 * GiB


def test_a_v2_limit_narrows_the_room_to_the_limit_less_its_anonymous_memory(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/container/app\n")
    root = tmp_path / "cgroup"
    _v2(root, "/container/app", "max", 0)
    _v2(root, "/container", str(2 * GiB), GiB // 2)     # the parent's limit binds too
    assert memory.cgroup_room(proc, root) == 2 * GiB - GiB // 2
    assert memory.room(proc, root) == 2 * GiB - GiB // 2


def test_the_tightest_cgroup_above_the_process_decides(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/a/b\n")
    root = tmp_path / "cgroup"
    _v2(root, "/a/b", str(GiB), 0)
    _v2(root, "/a", str(4 * GiB), 0)
    assert memory.cgroup_room(proc, root) == GiB


def test_a_cgroup_over_its_limit_leaves_no_room_not_a_negative_one(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/full\n")
    root = tmp_path / "cgroup"
    _v2(root, "/full", str(GiB), 2 * GiB)
    assert memory.cgroup_room(proc, root) == 0
    assert memory.room(proc, root) == 0


def test_a_v1_memory_limit_is_read_and_its_unlimited_value_is_no_limit(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")
    root = tmp_path / "cgroup"
    d = root / "memory" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "memory.limit_in_bytes").write_text(f"{3 * GiB}\n")
    (d / "memory.stat").write_text(f"cache 5\nrss {GiB}\ntotal_rss {GiB + 4096}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory.cgroup_room(proc, root) == 2 * GiB - 4096


@pytest.mark.parametrize("cgroup", ["", "garbage without colons\n", "0::relative/path\n", "0::/gone\n"])
def test_a_cgroup_that_cannot_be_read_narrows_nothing(tmp_path: Path, cgroup: str) -> None:
    proc = _proc(tmp_path, cgroup)
    assert memory.cgroup_room(proc, tmp_path / "cgroup") is None
    assert memory.room(proc, tmp_path / "cgroup") == 8 * GiB


def test_a_hostile_cgroup_path_never_climbs_out_of_the_cgroup_tree(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/../../outside\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "memory.max").write_text("1\n")
    assert memory.cgroup_room(proc, tmp_path / "cgroup" / "v2") is None


def test_a_limit_file_that_is_not_a_number_is_ignored(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/odd\n")
    root = tmp_path / "cgroup"
    _v2(root, "/odd", "12abc", 0)
    assert memory.cgroup_room(proc, root) is None


def test_read_ahead_asks_for_half_the_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "room", lambda *a, **k: 6 * GiB)
    assert snapshot.read_ahead_budget() == 3 * GiB
    monkeypatch.setattr(memory, "room", lambda *a, **k: None)
    assert snapshot.read_ahead_budget() == 0
