"""check --all on a tls:// Dask cluster: a real ``dask scheduler`` and two ``dask worker``
processes on 127.0.0.1 that take only peers a throwaway CA signed. The client with that
CA's certificate (by flags, or by Dask's configuration in its environment) checks a home;
a client without it, with another CA's, or not trusting the scheduler's, is refused in one
line (exit 1); each unusable TLS setting is one line naming it; contradictory flags exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the [fleet] extra (dask[distributed]) is not installed")

import dask  # noqa: E402
from tests.fleet.certs import OPENSSL, Identity, authority  # noqa: E402
from tests.fleet.helpers import Cluster, dask_cluster, free_port  # noqa: E402

from capsem_core import cli  # noqa: E402
from capsem_core.fleet.cluster import SchedulerError, client_tls, connect  # noqa: E402
from capsem_core.sample import write_sample_home  # noqa: E402

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="the openssl command makes the test's CA")


class Pki:
    def __init__(self, root: Path) -> None:
        ours = authority(root / "ours")
        self.scheduler = ours.issue("scheduler")  # the scheduler's and the workers'
        self.client = ours.issue("client")
        theirs = authority(root / "theirs", "theirs")
        self.stranger = theirs.issue("stranger")  # trusts another CA, signed by it
        # Another CA's certificate, but trusting the scheduler's CA.
        self.impostor = Identity(ours.ca_file, self.stranger.cert, self.stranger.key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("tls-home") / "home"
    write_sample_home(home, sessions=3, seed=5, bodies=40)
    return home


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Cluster]:
    with dask_cluster(tmp_path_factory.mktemp("dask-tls"), tls=pki.scheduler) as c:
        yield c


def check_all(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """capsem-ledger check --all in a process of its own (Dask reads its configuration from
    the environment when it is imported), no Dask TLS settings but ``env``'s."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    base.update(CAPSEM_HOME=str(home), CAPSEM_RUN_DIR=str(home / "run"), NO_COLOR="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "capsem_core", "check", "--all", *args], capture_output=True,
                          text=True, env=base, timeout=300)


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The run failed in one line of its own (exit 1, nothing on stdout, no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("capsem-ledger check: ") and done.stdout == ""
    for word in words:
        assert word in lines[0]
    return lines[0]


def test_check_all_on_a_tls_scheduler_with_the_clients_certificate_checks_the_home_and_says_sound(
        home: Path, cluster: Cluster, pki: Pki) -> None:
    done = check_all(home, "--verify-bodies", "--scheduler", cluster.address, *pki.client.flags())
    assert done.returncode == 0, done.stderr
    assert "Ledgers checked: 2" in done.stdout and "Every ledger is sound" in done.stdout
    assert f"on the Dask cluster at {cluster.address} (2 worker threads)" in done.stdout


def test_daskss_tls_configuration_in_the_environment_serves_as_the_flags(home: Path, cluster: Cluster,
                                                                         pki: Pki) -> None:
    env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": pki.client.ca_file,
           "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": pki.client.cert,
           "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": pki.client.key}
    done = check_all(home, "--json", "--scheduler", cluster.address, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["runner"] == cluster.address and doc["jobs"] == 2
    assert {e["verdict"] for e in doc["ledgers"]} == {"ok"} and len(doc["ledgers"]) == 2
    assert all(e["worker"].startswith("tls://127.0.0.1:") for e in doc["ledgers"])


def test_a_client_with_no_tls_settings_is_refused_in_one_line_before_it_connects(home: Path,
                                                                              cluster: Cluster) -> None:
    refused(check_all(home, "--scheduler", cluster.address), f"{cluster.address} is a TLS scheduler",
            "--tls-ca-file", "--tls-cert", "distributed.comm.tls.ca-file")


def test_a_client_whose_certificate_another_ca_signed_is_refused_by_the_scheduler_in_one_line(
        home: Path, cluster: Cluster, pki: Pki) -> None:
    # TLS 1.3: the scheduler's alert may or may not be read before it closes the connection;
    # either way the line names the scheduler and the certificate it refused.
    refused(check_all(home, "--scheduler", cluster.address, *pki.impostor.flags()),
            f"the scheduler at {cluster.address}", f"--tls-cert {pki.impostor.cert}")


def test_a_client_that_does_not_trust_the_schedulers_certificate_is_refused_in_one_line(
        home: Path, cluster: Cluster, pki: Pki) -> None:
    refused(check_all(home, "--scheduler", cluster.address, *pki.stranger.flags()),
            f"{cluster.address}: the scheduler's certificate is not trusted by --tls-ca-file {pki.stranger.ca_file}")


def test_a_tcp_client_of_the_tls_scheduler_is_refused_in_one_line(home: Path, cluster: Cluster) -> None:
    plain = cluster.address.replace("tls://", "tcp://")
    refused(check_all(home, "--scheduler", plain), f"the scheduler at {plain} closed the connection",
            "tls://")


def test_a_tls_client_of_a_tcp_scheduler_is_told_it_does_not_speak_tls(tmp_path: Path, pki: Pki) -> None:
    with dask_cluster(tmp_path, workers=1) as plain:
        address = plain.address.replace("tcp://", "tls://")
        tls = client_tls(address, ca_file=pki.client.ca_file, cert=pki.client.cert, key=pki.client.key)
        for _ in range(5):  # the TLS hello may meet an open connection or one Dask already closed
            with pytest.raises(SchedulerError, match=f"^the scheduler at {address} does not speak TLS "):
                with connect(address, workers=1, tls=tls, timeout="60s"):
                    pass


def test_a_tls_scheduler_that_is_not_there_is_one_line_saying_it_cannot_be_reached(pki: Pki) -> None:
    # Nothing listens there: refused at every try, whatever the timeout.
    address = f"tls://127.0.0.1:{free_port()}"
    tls = client_tls(address, ca_file=pki.client.ca_file, cert=pki.client.cert, key=pki.client.key)
    with pytest.raises(SchedulerError) as caught:
        with connect(address, workers=1, tls=tls, timeout="1s"):
            pass
    assert str(caught.value).startswith(f"cannot reach the scheduler at {address} within 1s: ")
    assert "\n" not in str(caught.value)


@pytest.fixture
def bad_files(tmp_path: Path, pki: Pki) -> dict[str, str]:
    junk = tmp_path / "junk.pem"
    junk.write_bytes(bytes(range(256)) * 3)
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)
    encrypted = tmp_path / "encrypted.key"
    assert OPENSSL is not None
    subprocess.run([OPENSSL, "ec", "-in", pki.client.key, "-aes256", "-passout", "pass:secret", "-out", str(encrypted)],
                   check=True, capture_output=True, timeout=120)
    return {"junk": str(junk), "fifo": str(fifo), "dir": str(tmp_path), "gone": str(tmp_path / "gone.pem"),
            "encrypted": str(encrypted)}


# (the settings: a name of bad_files, or ca / cert / key / other-key / none; the line says)
UNUSABLE = {
    "a CA file that is not there": (("gone", "cert", "key"), "--tls-ca-file {gone}: cannot be read: No such file"),
    "a directory as the CA file": (("dir", "cert", "key"), "--tls-ca-file {dir}: not a regular file"),
    "a FIFO as the certificate": (("ca", "fifo", "key"), "--tls-cert {fifo}: not a regular file"),
    "a CA file that holds no certificate": (("junk", "cert", "key"), "--tls-ca-file {junk}: holds no PEM certificate"),
    "a key as the certificate": (("ca", "key", "key"), "--tls-cert {key}: holds no PEM certificate"),
    "another certificate's key": (("ca", "cert", "other-key"), "--tls-key {other-key} is not the key of --tls-cert"),
    "no key, and none in the certificate's file": (("ca", "cert", "none"), "--tls-cert {cert}: holds no private key"),
    "a key file of junk": (("ca", "cert", "junk"), "--tls-key {junk}: holds no PEM private key"),
    "a key encrypted with a passphrase": (("ca", "cert", "encrypted"), "--tls-key {encrypted}: the key is encrypted"),
    "no CA file": (("none", "cert", "key"), "is a TLS scheduler: this client needs --tls-ca-file"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_each_unusable_tls_setting_is_one_line_naming_it_exit_1(case: str, home: Path, pki: Pki,
                                                               bad_files: dict[str, str],
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(bad_files, ca=pki.client.ca_file, cert=pki.client.cert, key=pki.client.key,
                 **{"other-key": pki.stranger.key})
    settings, expected = UNUSABLE[case]
    args = [arg for flag, name in zip(("--tls-ca-file", "--tls-cert", "--tls-key"), settings) if name != "none"
            for arg in (flag, files[name])]
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(home / "run"))
    # Nothing listens at port 9: every setting is refused before anything connects.
    code = cli.main(["check", "--all", "--scheduler", "tls://127.0.0.1:9", *args])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("capsem-ledger check: ") and expected.format(**files) in err


def test_a_tls_setting_from_daskss_configuration_is_named_by_its_configuration_key(home: Path, pki: Pki,
                                                                                   tmp_path: Path) -> None:
    gone = str(tmp_path / "gone.key")
    with dask.config.set({"distributed.comm.tls.ca-file": pki.client.ca_file,
                          "distributed.comm.tls.client.cert": pki.client.cert,
                          "distributed.comm.tls.client.key": gone}):
        with pytest.raises(SchedulerError, match=f"^distributed.comm.tls.client.key {gone}: cannot be read"):
            client_tls("tls://127.0.0.1:9")
        # A flag overrides the configuration, setting by setting.
        tls = client_tls("tls://127.0.0.1:9", key=pki.client.key)
    assert tls is not None and tls.named == {"tls_ca_file": f"distributed.comm.tls.ca-file {pki.client.ca_file}",
                                             "tls_client_cert": f"distributed.comm.tls.client.cert {pki.client.cert}",
                                             "tls_client_key": f"--tls-key {pki.client.key}"}


@pytest.mark.parametrize("args, says", [
    (["--all", "--scheduler", "tcp://127.0.0.1:9", "--tls-cert", "x"], "--tls-cert is for a TLS scheduler"),
    (["--all", "--scheduler", "local", "--tls-key", "x"], "--tls-key is for a TLS scheduler"),
    (["--all", "--tls-ca-file", "x"], "--tls-ca-file is for a TLS scheduler"),
    (["--tls-cert", "x"], "--tls-cert is an option of check --all"),
    (["--all", "--scheduler", "tls://"], "--scheduler takes tcp://host:port or 'local' (tls://host:port for TLS)"),
    (["--all", "--scheduler", "tls://127.0.0.1"], "not 'tls://127.0.0.1'"),
    (["--all", "--scheduler", "tcp://127.0.0.1:abc"], "not 'tcp://127.0.0.1:abc'"),
    (["--all", "--scheduler", "tcp://127.0.0.1:99999"], "not 'tcp://127.0.0.1:99999'"),
    (["--all", "--scheduler", "tls://[::1:8786"], "not 'tls://[::1:8786'"),
    (["--all", "--scheduler", "udp://127.0.0.1:8786"], "not 'udp://127.0.0.1:8786'"),
])
def test_contradictory_tls_flags_and_addresses_that_are_not_host_and_port_exit_2(
        args: list[str], says: str, home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPSEM_HOME", str(home))
    monkeypatch.setenv("CAPSEM_RUN_DIR", str(home / "run"))
    with pytest.raises(SystemExit) as caught:
        cli.main(["check", *args])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and says in err and "Traceback" not in err
