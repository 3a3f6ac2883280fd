"""``capsem-ledger export``: every body to a safely named file plus manifest.jsonl, hostile
keys kept inside DIR, resumable after an interrupt, damaged bodies left out and named."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from capsem_core._native import _blake3
from capsem_core.export.names import export_name
from oracles.archive_reader import archived_bodies

from tests.bodies.conftest import write_blocks_ledger
from tests.cli.ledger_cli import run


def _manifest(out: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_every_body_is_a_file_named_by_its_key_and_hash_and_the_manifest_lists_them(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=6, size=20_000)
    done = run("export", "--db", str(tmp_path / "l"), str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    want = archived_bodies(tmp_path / "l" / "session.db")
    manifest = _manifest(tmp_path / "out")
    assert [(m["event_id"], m["table"], m["direction"], m["hash"]) for m in manifest] == \
        [(b.event_id, b.source_table, b.direction, b.body_hash) for b in want]
    for m, b in zip(manifest, want):
        assert m["path"] == export_name(b.event_id, b.source_table, b.direction, b.body_hash[7:])
        assert (tmp_path / "out" / m["path"]).read_bytes() == b.data
        assert m["content_type"] == "application/octet-stream"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([m["path"] for m in manifest]
                                                                          + ["manifest.jsonl"])


def test_hostile_keys_never_name_a_path_outside_dir(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=4, size=2000)
    hostile = ["../../escape", "/etc/passwd", ".hidden", "a/../../b\x00c", "\x1b[31m\u202e", "..", ""]
    with sqlite3.connect(tmp_path / "l" / "session.db") as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        ids = [r[0] for r in conn.execute("SELECT id FROM event_body_blobs ORDER BY id")]
        for rid, value in zip(ids, hostile):
            conn.execute("UPDATE event_body_blobs SET event_id = ?, direction = ? WHERE id = ?",
                         (value, "../" + value, rid))
    out = tmp_path / "deep" / "out"
    out.parent.mkdir()  # export creates DIR, never its parents
    done = run("export", "--db", str(tmp_path / "l"), str(out))
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == len(ids) + 1
    assert all(n == "manifest.jsonl" or (not n.startswith(".") and "/" not in n) for n in names)
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["out"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "l"]
    assert {m["event_id"] for m in _manifest(out)} >= set(hostile[:len(ids)])


def test_a_link_as_dir_or_in_place_of_a_file_is_never_followed(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=2, size=2000)
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, tmp_path / "linkdir")
    done = run("export", "--db", str(tmp_path / "l"), str(tmp_path / "linkdir"))
    assert done.returncode == 1 and b"symbolic link" in done.stderr and list(victim.iterdir()) == []
    first = run("export", "--db", str(tmp_path / "l"), str(tmp_path / "out"))
    assert first.returncode == 0
    name = _manifest(tmp_path / "out")[0]["path"]
    (tmp_path / "out" / name).unlink()
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not touch")
    os.symlink(secret, tmp_path / "out" / name)
    again = run("export", "--db", str(tmp_path / "l"), str(tmp_path / "out"))
    # A link where an exported file belongs is not the export's to replace: refused, untouched.
    assert again.returncode == 1 and b"symbolic link" in again.stderr and name.encode() in again.stderr
    assert secret.read_bytes() == b"do not touch"
    assert (tmp_path / "out" / name).is_symlink()


def test_a_rerun_skips_verified_files_and_rewrites_damaged_or_missing_ones(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=6, size=20_000)
    out = tmp_path / "out"
    assert run("export", "--db", str(tmp_path / "l"), str(out)).returncode == 0
    manifest = _manifest(out)
    (out / manifest[0]["path"]).unlink()
    damaged = out / manifest[1]["path"]
    damaged.write_bytes(b"x" + damaged.read_bytes()[1:])
    dead = subprocess.Popen(["true"])   # a process that has ended: no run of its is alive
    dead.wait()
    stale = out / f".{manifest[2]['path']}.part-{dead.pid}"  # left by a run killed outright
    stale.write_bytes(b"half")
    # Not export's to remove: a part of a run still writing here, and a user's file that only
    # looks like a part.
    with subprocess.Popen(["sleep", "60"]) as live:
        try:
            running = out / f".{manifest[3]['path']}.part-{live.pid}"
            running.write_bytes(b"in flight")
            theirs = out / ".notes.txt.part-1"
            theirs.write_bytes(b"my data")
            (out / ".part-7").write_bytes(b"odd")   # a name with nothing before the suffix
            done = run("export", "--db", str(tmp_path / "l"), str(out))
        finally:
            live.kill()
    assert done.returncode == 0 and f"({len(manifest) - 2} already there)".encode() in done.stderr
    assert not stale.exists() and running.read_bytes() == b"in flight" and theirs.read_bytes() == b"my data"
    assert (out / ".part-7").read_bytes() == b"odd"
    for m in _manifest(out):
        assert "blake3:" + _blake3.hexdigest((out / m["path"]).read_bytes()) == m["hash"]


def test_an_interrupted_export_leaves_no_partial_file_and_resumes(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=60, size=400_000)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "capsem_core", "export", "--db", str(tmp_path / "l"), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and len(list(out.iterdir())) >= 3):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and b"terminated" in err, err
    assert not (out / "manifest.jsonl").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no .part file left
    done = run("export", "--db", str(tmp_path / "l"), str(out))
    assert done.returncode == 0 and b"already there" in done.stderr
    for m in _manifest(out):
        assert "blake3:" + _blake3.hexdigest((out / m["path"]).read_bytes()) == m["hash"]
    assert len(_manifest(out)) == 120


def test_a_damaged_body_is_left_out_named_and_the_rest_exported(tmp_path: Path) -> None:
    write_blocks_ledger(tmp_path / "l", count=6, size=20_000)
    with sqlite3.connect(tmp_path / "l" / "session.db") as conn:
        conn.execute("UPDATE event_body_blobs SET body_hash = ? WHERE id = 3", ("blake3:" + "cd" * 32,))
    done = run("export", "--db", str(tmp_path / "l"), str(tmp_path / "out"))
    assert done.returncode == 1
    assert b"skipped" in done.stderr and b"does not match" in done.stderr
    assert len(_manifest(tmp_path / "out")) == 11
