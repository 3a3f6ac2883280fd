"""Fleets: every ledger of a home (or of many homes on shared storage) checked at once.

``check_all`` (``run.py``) finds the ledgers (``discover.py``: a home's ephemeral and
persistent ledgers, directory trees), checks each with the same ``check_ledger`` and options
``check`` uses (``task.py``), in a process per ledger on this machine (``local.py``) or on a
Dask cluster (``cluster.py``, the optional ``[fleet]`` extra), where the verify of a large
ledger is split into block ranges and joined again (``merge.py``), and returns a
``FleetReport`` of one ``LedgerResult`` per ledger (``results.py``). The command line is
``capsem-ledger check --all`` (``capsem_core.cli.fleet``).
"""

from __future__ import annotations

from capsem_core.fleet.discover import MAX_TREE_DEPTH, Discovery, FleetLedger, discover, discover_home, discover_tree
from capsem_core.fleet.results import FleetReport, LedgerResult, fleet_to_json
from capsem_core.fleet.run import DEFAULT_RANGE_BYTES, check_all
from capsem_core.fleet.task import UnsupportedOption

__all__ = ["DEFAULT_RANGE_BYTES", "MAX_TREE_DEPTH", "Discovery", "FleetLedger", "FleetReport", "LedgerResult",
           "UnsupportedOption", "check_all", "discover", "discover_home", "discover_tree", "fleet_to_json"]
