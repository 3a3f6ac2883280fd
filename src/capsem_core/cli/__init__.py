"""The ``capsem-ledger`` command line: ``app`` wires one module per command, ``terminal``
owns how text reaches a terminal, ``errors`` how a command gives up."""

from __future__ import annotations

from capsem_core.cli.app import main

__all__ = ["main"]
