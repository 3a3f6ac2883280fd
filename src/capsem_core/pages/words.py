"""The words of the page map's findings: one line each, in the manner of quick_check's.

``capsem_core._native._pages`` reports raw findings (a kind, pages, roots); this module
names each tree by what sqlite_schema calls it ("index idx_net_events_timestamp") and words the
line. Ledger names reach the report as they are; the text renderer escapes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from capsem_core._native import _pages

_OWNER = {0: None, 1: "the freelist", 2: "the lock-byte page"}


def _tree(names: Mapping[int, str], root: int) -> str:
    return "the freelist" if root == 0 else names.get(root, f"tree {root}")


# One template per kind; the fields are the finding's own (page, tree, source, a, b) and
# who (the tree walked, by name), first (what used the page before), got_type, got_parent
# (a pointer-map entry read) and max_depth.
TEMPLATES: dict[str, str] = {
    "never_used": "Page {page}: never used",
    "second_reference": "2nd reference to page {page} (from page {source} of {who}; already used by {first})",
    "invalid_reference": "invalid page number {page} (from page {source} of {who}; the database has {a} pages)",
    "pointer_map_referenced": "Page {page}: pointer map referenced (by {who})",
    "pointer_map_entry": "Bad ptr map entry key={page} expected=({a},{source}) got=({got_type},{got_parent})",
    "pointer_map_unreadable": "Failed to read ptrmap key={page}",
    "freelist_size": "Freelist: size is {a} but should be {b}",
    "freelist_leaves": "Freelist: freelist leaf count too big on page {page} ({a} leaves; a trunk holds {b})",
    "max_root": "max rootpage ({a}) disagrees with header ({b})",
    "incremental_vacuum": "incremental_vacuum enabled with a max rootpage of zero",
    "bad_page": "{who} page {page}: not a b-tree page (type byte {a})",
    "bad_cell_count": "{who} page {page}: {a} cells, more than a page holds ({b})",
    "bad_cell": "{who} page {page} cell {a}: offset {b} out of range",
    "short_overflow": "{who} page {source}: the overflow chain from page {page} ends after {a} of {b} pages",
    "too_deep": "{who} page {page}: the tree is deeper than {max_depth} levels",
    "bad_header": "the database header is not one SQLite reads (the field at byte {a})",
    "short_file": "the header counts {a} pages but the file holds {b}",
    "shrank": "session.db shrank while its pages were read",
}


def word(f: _pages.Finding, names: Mapping[int, str]) -> str:
    """One finding of the page map as a line of the report."""
    template = TEMPLATES.get(f.kind, "page map finding " + f.kind + " on page {page}")
    return template.format(page=f.page, tree=f.tree, source=f.source, a=f.a, b=f.b, who=_tree(names, f.tree),
                           first=_OWNER.get(int(f.b)) or _tree(names, f.a), got_type=f.b >> 32,
                           got_parent=f.b & 0xFFFFFFFF, max_depth=_pages.MAX_DEPTH)


def walk_lines(walk: _pages.Walk, names: Mapping[int, str], *, in_tree: bool) -> list[str]:
    """The walk's findings as lines: the whole-file ones always, the ones inside one tree
    (which that tree's own quick_check words) only when ``in_tree``."""
    kept = [f for f in walk.findings if in_tree or not f.in_tree]
    lines = [word(f, names) for f in kept]
    total = walk.findings_total if in_tree else walk.findings_total - walk.in_tree_total
    shown_of_total = sum(1 for f in walk.findings if in_tree or not f.in_tree)
    if total > shown_of_total:
        lines.append(f"... and {total - shown_of_total} more page-map findings")
    return lines


__all__ = ["TEMPLATES", "walk_lines", "word"]
