"""Deterministic, realistic sample ledgers and whole ``CAPSEM_HOME`` layouts: the bundled
sample data every other part of capsem-core runs on.

* ``write_sample_ledger`` (``ledger.py``) writes one session ledger through ``LedgerWriter``:
  AI agent traces against Anthropic, OpenAI and Google (``providers.py``) whose requests carry
  the whole conversation so far, native / MCP / built-in tool calls on the identity graph,
  and the HTTP, DNS, file, process, audit, credential, transport and security rows around
  them (``session.py`` drives one session; ``events/`` writes each kind of row).
* ``write_sample_home`` (``home.py``) lays out a whole Capsem home with ``main.db``.

Text comes from fixed pools (``pools.py``); a mix (``profiles.py``) says how sessions behave.
The same seed gives the same rows and a byte-identical ``session.bodies``. The ``sample``
command of ``capsem-ledger`` lives in ``capsem_core.cli.sample``.
"""

from __future__ import annotations

from capsem_core.lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from capsem_core.sample.home import HomeCategory, HomeSession, HomeSummary, write_sample_home
    from capsem_core.sample.ledger import DEFAULT_START_TIME, SampleSummary, write_sample_ledger
    from capsem_core.sample.profiles import MIXES, Mix
    from capsem_core.sample.units import parse_size
del TYPE_CHECKING

# Each public name and the module defining it: the mixes and sizes (what the ``sample``
# command's arguments need) load without the writers.
_HOMES: dict[str, str] = {
    **dict.fromkeys(("HomeCategory", "HomeSession", "HomeSummary", "write_sample_home"), "home"),
    **dict.fromkeys(("DEFAULT_START_TIME", "SampleSummary", "write_sample_ledger"), "ledger"),
    **dict.fromkeys(("MIXES", "Mix"), "profiles"),
    "parse_size": "units",
}

# Spelled out: type checkers read exports from a literal list only.
__all__ = [
    "DEFAULT_START_TIME",
    "HomeCategory",
    "HomeSession",
    "HomeSummary",
    "MIXES",
    "Mix",
    "SampleSummary",
    "parse_size",
    "write_sample_home",
    "write_sample_ledger",
]
__getattr__, __dir__ = attach(globals(), _HOMES)
