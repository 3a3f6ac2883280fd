"""The Python layer's house rules, read from the source: presentation lives in ``cli/`` (no
other module imports it, prints or writes to the terminal's streams), and no module is
longer than the house allows."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "capsem_core"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "_native" not in p.parts)
LIBRARY = [p for p in MODULES if p.relative_to(PACKAGE).parts[0] != "cli" and p.name != "__main__.py"]
# The longest a module may grow before it is split by concept.
MAX_MODULE_LINES = 520


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every module ``tree`` imports, at any depth (a lazy import inside a function too),
    relative imports resolved against ``module``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[:-node.level]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_nothing_outside_cli_imports_the_command_line() -> None:
    offenders = {_name(p): sorted(m for m in _imports(ast.parse(p.read_text()), _name(p))
                                  if m == "capsem_core.cli" or m.startswith("capsem_core.cli."))
                 for p in LIBRARY}
    assert {k: v for k, v in offenders.items() if v} == {}
    # The walk finds a lazy, relative import of the command line too.
    lazy = ast.parse("def f():\n    from ..cli import terminal\n")
    assert "capsem_core.cli.terminal" in _imports(lazy, "capsem_core.sessions.listing")


def _writes_to_the_terminal(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            lines.append(node.lineno)
        # sys.stdout / sys.stderr, except to flush them (before a fork: no buffered line twice).
        if (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            lines.append(node.lineno)
    flushes = {node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "flush"
               and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("stdout", "stderr")}
    return [n for n in lines if n not in flushes]


# The output-path policy owns "-": a command's output written to standard output (data, not
# words for the terminal), the one place outside cli/ that names the stream.
STDOUT_OWNER = "capsem_core.outputs"


def test_the_library_never_prints() -> None:
    offenders = {_name(p): found for p in LIBRARY
                 if _name(p) != STDOUT_OWNER and (found := _writes_to_the_terminal(ast.parse(p.read_text())))}
    assert offenders == {}
    assert _writes_to_the_terminal(ast.parse("import sys\nprint('x')\nsys.stderr.write('y')\n")) == [2, 3]
    assert _writes_to_the_terminal(ast.parse("import sys\nsys.stdout.flush()\n")) == []


def test_no_module_is_longer_than_the_house_allows() -> None:
    long = {_name(p): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
