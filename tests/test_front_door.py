"""The package's front door: every name an embedder needs imports from ``capsem_core``, is the
object its own module defines, and loads only when first used (importing the package loads no
module of it, and not numpy)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import capsem_core


def test_the_embedders_names_import_from_the_package() -> None:
    from capsem_core import Body, LedgerError, LedgerWriter, Ledger, check_ledger  # noqa: F401

    for name, home in capsem_core._HOMES.items():
        assert getattr(capsem_core, name) is getattr(importlib.import_module(f"capsem_core.{home}"), name), name
    assert set(capsem_core.__all__) == {"__version__", *capsem_core._HOMES}
    assert set(capsem_core.__all__) <= set(dir(capsem_core))


def test_a_name_the_package_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        capsem_core.Nope  # type: ignore[attr-defined]


def test_importing_the_package_loads_nothing_until_a_name_is_used() -> None:
    probe = ("import sys, capsem_core\n"
             "loaded = sorted(m for m in sys.modules if m.startswith('capsem_core.') or m == 'numpy')\n"
             "print(','.join(loaded))\n"
             "capsem_core.Ledger\n"
             "print('capsem_core.ledger' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "" and out[1] == "True", out
