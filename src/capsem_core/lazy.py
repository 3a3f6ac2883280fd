"""Packages whose public names load their modules on first use (PEP 562).

A package lists each name and the submodule defining it, then takes its ``__getattr__`` and
``__dir__`` from here::

    from capsem_core.lazy import attach

    _HOMES = {"Event": "reader", ...}
    __all__ = [*_HOMES]
    __getattr__, __dir__ = attach(globals(), _HOMES)

so importing the package, or one light submodule of it, never loads its heavy siblings
(``capsem_core.events.tables`` without numpy, for instance). Type checkers cannot follow
that: the package also imports each name under ``if TYPE_CHECKING:``. Like the front door,
this module imports nothing when it loads (not even ``typing``): it runs on the command
line's start-up path.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any
del TYPE_CHECKING


def attach(namespace: dict[str, Any], homes: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose globals are ``namespace``:
    ``homes`` maps each public name to the submodule (relative to the package) defining it."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value   # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__


__all__ = ["attach"]
