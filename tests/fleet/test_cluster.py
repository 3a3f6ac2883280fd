"""check --all on a real Dask cluster: a ``dask scheduler`` and two ``dask worker`` processes
on 127.0.0.1. The same verdicts and reports as a local run (large ledgers split into block
ranges), a worker killed mid-run, a ledger removed mid-run."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the [fleet] extra (dask[distributed]) is not installed")

from distributed import Client  # noqa: E402
from capsem_core.sample import write_sample_home  # noqa: E402
from tests.fleet.helpers import (  # noqa: E402
    Cluster, FleetHome, dask_cluster, findings_of, fleet_home, heavy_ledger, sized_home, verdicts, wait_for,
)

from capsem_core import cli, cores  # noqa: E402
from capsem_core.fleet import check_all, discover_home  # noqa: E402

# Small enough that each heavy ledger's verify is split into several block ranges.
RANGE_BYTES = 128 << 10


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> FleetHome:
    root = tmp_path_factory.mktemp("cluster-home")
    source = heavy_ledger(root / "source")
    return fleet_home(root, source, heavy=4, sessions=3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    with dask_cluster(tmp_path_factory.mktemp("dask")) as c:
        yield c


@pytest.fixture(scope="module")
def local_run(home: FleetHome):  # type: ignore[no-untyped-def]
    return check_all([], home=home.home, verify_bodies=True, jobs=2)


def test_a_cluster_run_gives_the_verdicts_and_reports_of_a_local_run(home: FleetHome, cluster: Cluster,
                                                                     local_run) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        report = check_all([], home=home.home, verify_bodies=True, client=client, range_bytes=RANGE_BYTES)
    assert verdicts(report) == verdicts(local_run)
    assert verdicts(report)[str(home.damaged)] == "damaged"
    # Every field of every ledger's report, findings and their order included, is the local one.
    assert findings_of(report) == findings_of(local_run)
    split = [r for r in report if r.tasks > 1]
    assert {r.ledger.directory for r in split} == set(home.heavy)
    assert all(r.worker and r.worker.startswith("tcp://127.0.0.1:") for r in report)
    assert report.runner == cluster.address and report.jobs == 2
    assert all(r.attempts == r.tasks and not r.retried for r in report)


def test_each_task_runs_on_its_share_of_its_workers_host(tmp_path: Path, cluster: Cluster) -> None:
    # Two one-thread workers on this host: each check's share is half its cores (a small
    # ledger's check runs one thread whatever its share).
    home = tmp_path / "home"
    big = sized_home(home)
    with Client(cluster.address) as client:
        report = check_all([], home=home, client=client)
    threads = {r.ledger.directory: r.report.checks["pages"].counts["threads"] for r in report if r.report is not None}
    assert len(threads) == 2 and threads.pop(big) == cores.share(2) and set(threads.values()) == {1}


def test_check_all_scheduler_on_the_command_line_prints_the_same_json(home: FleetHome, cluster: Cluster, local_run,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CAPSEM_HOME", str(home.home))
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(home.home / "run"))
    code = cli.main(["check", "--all", "--verify-bodies", "--scheduler", cluster.address, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["runner"] == cluster.address
    local = findings_of(local_run)
    for entry in doc["ledgers"]:
        for k in ("seconds", "worker", "tasks", "attempts", "retried"):
            entry.pop(k)
        assert entry == json.loads(json.dumps(local[entry["path"]]))


def test_a_ledger_removed_mid_run_is_unreadable_and_the_rest_are_fine(tmp_path: Path, home: FleetHome,
                                                                      cluster: Cluster) -> None:
    mine = tmp_path / "home"
    shutil.copytree(home.home, mine, symlinks=True)
    ledgers = discover_home(mine).ledgers
    smallest = min(ledgers, key=lambda x: x.size)
    # Gone after the run found it and before a worker reads it. (Removed once the first result
    # is in, as the local runner's test does it, the smallest ledger may already have been
    # checked: the workers take tasks from every ledger at once, so that would be a race.)
    shutil.rmtree(smallest.directory)

    with Client(cluster.address) as client:
        report = check_all(ledgers, verify_bodies=True, client=client, range_bytes=RANGE_BYTES)
    gone = next(r for r in report if r.ledger.directory == smallest.directory)
    assert gone.verdict == "unreadable" and "session.db" in (gone.error or "")
    damaged = mine / "run" / "sessions" / home.damaged.name
    assert all(r.verdict == ("damaged" if r.ledger.directory == damaged else "ok")
               for r in report if r is not gone)


def test_a_worker_killed_mid_run_has_its_tasks_run_again_and_the_report_says_so(
        tmp_path: Path, home: FleetHome, local_run) -> None:  # type: ignore[no-untyped-def]
    with dask_cluster(tmp_path) as own, Client(own.address) as watcher:
        killed: list[str] = []

        def kill_a_busy_worker() -> None:
            def busy() -> str | None:
                info = watcher.scheduler_info(n_workers=-1)["workers"]
                for address, keys in watcher.processing().items():
                    if any(str(k).startswith("capsem-") for k in keys):
                        return str(info[address]["name"])
                return None

            name = wait_for(busy, timeout=120, every=0.005)
            own.kill_worker(name)
            killed.append(name)

        killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
        killer.start()
        with Client(own.address) as client:
            report = check_all([], home=home.home, verify_bodies=True, client=client, range_bytes=RANGE_BYTES)
        killer.join(timeout=120)
    assert killed
    assert verdicts(report) == verdicts(local_run)
    assert findings_of(report) == findings_of(local_run)
    retried = [r for r in report if r.retried]
    assert retried, "no ledger says it was run again"
    assert all(r.attempts > r.tasks for r in retried)
    assert all("died while it held" in why and "run again" in why for r in retried for why in r.retried)
    assert report.totals()["retried"] == len(retried)


def test_every_retry_is_reported_however_many_tasks_the_schedulers_event_log_outlived(tmp_path: Path) -> None:
    """The scheduler keeps the last ``low-level-log-length`` events of a topic (1000 by
    default): a run of more tasks than that lost the start events of its first ones, and
    with them the report's retries. Here the log keeps 3, and each ledger's check
    raises once on a worker before it runs (more ledgers than that)."""
    home = tmp_path / "home"
    write_sample_home(home, sessions=7, seed=5, bodies=10)
    (tmp_path / "flaky").mkdir()
    env = {"DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH": "3", "CAPSEM_TEST_FLAKY_DIR": str(tmp_path / "flaky")}
    with dask_cluster(tmp_path, env=env, preload=Path(__file__).with_name("flaky.py")) as own, \
            Client(own.address) as client:
        report = check_all([], home=home, client=client)
    n = len(report.results)
    assert n > 3 and all(r.verdict == "ok" for r in report)
    assert [r.attempts for r in report] == [2] * n
    assert all(r.retried == ["its check raised and was retried 1 time"] for r in report)
    assert report.totals()["retried"] == n


def _sigint_handler() -> str:
    import signal

    return "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled"


def test_a_local_clusters_workers_leave_ctrl_c_to_the_command_and_it_keeps_its_handler() -> None:
    """A Ctrl-C at the terminal reaches every process of the group: each worker of --scheduler
    local printed its own traceback. They ignore it; the command stops them as it stops."""
    import signal

    from capsem_core.fleet.cluster import connect

    before = signal.getsignal(signal.SIGINT)
    with connect("local", workers=1) as client:
        assert set(client.run(_sigint_handler).values()) == {"ignored"}
        assert signal.getsignal(signal.SIGINT) is before
