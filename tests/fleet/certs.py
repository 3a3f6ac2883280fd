"""Throwaway certificate authorities for the TLS tests, made with the ``openssl`` command
(the ``cryptography`` package is not a dependency): a CA, and certificates it signs for a
scheduler, its workers and clients (EC P-256 keys, valid two days, unencrypted)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Identity:
    """A certificate and its key, and the CA file that says whom to trust."""

    ca_file: str
    cert: str
    key: str

    def flags(self) -> list[str]:
        """The same settings as check --all's (and dask scheduler / worker's) flags."""
        return ["--tls-ca-file", self.ca_file, "--tls-cert", self.cert, "--tls-key", self.key]


def _openssl(*args: str) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], check=True, capture_output=True, timeout=120)


@dataclass(frozen=True)
class Authority:
    directory: Path
    name: str

    @property
    def ca_file(self) -> str:
        return str(self.directory / f"{self.name}.pem")

    def issue(self, name: str) -> Identity:
        """A certificate for ``name`` signed by this CA."""
        stem = self.directory / name
        _openssl("req", *_EC, "-keyout", f"{stem}.key", "-out", f"{stem}.csr", "-subj", f"/CN={name}")
        _openssl("x509", "-req", "-in", f"{stem}.csr", "-CA", self.ca_file, "-CAkey",
                 str(self.directory / f"{self.name}.key"), "-CAcreateserial", "-out", f"{stem}.pem", "-days", "2")
        return Identity(self.ca_file, f"{stem}.pem", f"{stem}.key")


def authority(directory: Path, name: str = "ca") -> Authority:
    """A new self-signed CA in ``directory`` (``<name>.pem``, ``<name>.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *_EC, "-keyout", str(directory / f"{name}.key"), "-out", str(directory / f"{name}.pem"),
             "-days", "2", "-subj", f"/CN={name}")
    return Authority(directory, name)
