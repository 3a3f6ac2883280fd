"""Session lists as the doctor prints them: the one renderer of main.db's sessions.

``list`` prints the doctor's ``list_sessions`` table (:func:`list_lines`) or its JSON
(:func:`listed_json`); ``check`` prints the doctor's "Recent sessions:" table first, and
``check --list`` that table with the usage columns (:func:`recent_lines`,
:func:`recent_json`). Every string from main.db or a ledger is data, not trusted text: it
goes through ``sanitize``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from capsem_core.cli.terminal import Style, render_table, sanitize
from capsem_core.sessions import vm_name
from capsem_core.sessions.listing import ListedSession
from capsem_core.sessions.maindb import SessionRow


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_created(created_at: str | None) -> str:
    """``MM-DD HH:MM:SS``; the first 16 characters of the raw text when it does not parse."""
    raw = created_at or ""
    try:
        return _parse_time(raw).strftime("%m-%d %H:%M:%S")
    except (ValueError, TypeError):
        return raw[:16]


def format_duration(created_at: str | None, stopped_at: str | None, status: str | None) -> str:
    """``running`` / ``?`` without both times; else ``{s}s``, ``{m}m{s}s`` or ``{h}h{m}m``."""
    if not stopped_at or not created_at:
        return "running" if status == "running" else "?"
    try:
        s = int((_parse_time(stopped_at) - _parse_time(created_at)).total_seconds())
    except (ValueError, TypeError, OverflowError):
        return "?"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    return f"{s // 3600}h{(s % 3600) // 60}m"


LIST_FOOTER = "* = session.db on disk (queryable)"


def list_header() -> str:
    """The doctor's header, with the VM name as a trailing column."""
    return (f"{'ID':<36}  {'Created':>16}  {'Dur':>6}  {'Cost':>7}  {'net':>5}  "
            f"{'tokens':>7}  {'tool':>5}  {'fs':>5}  Name")


def format_list_row(item: ListedSession) -> str:
    """The doctor's row, then the name. main.db and ledgers are data, not trusted text:
    every string from them goes through ``sanitize``, so no escape sequence reaches the
    terminal."""
    r = item.row
    marker = "*" if item.has_ledger else " "
    line = (f"{sanitize(r.id):<36}{marker} {sanitize(format_created(r.created_at)):>16}  "
            f"{format_duration(r.created_at, r.stopped_at, r.status):>6}  "
            f"${r.total_estimated_cost:>6.2f}  {r.total_requests:>5}  {r.total_tokens:>7}  "
            f"{r.total_tool_calls:>5}  {r.total_file_events:>5}")
    return f"{line}  {sanitize(item.name)}" if item.name else line


def list_lines(items: Sequence[ListedSession], colour: bool = False) -> list[str]:
    """The text lines of ``list`` (header, rule, rows, blank, footer)."""
    s = Style(colour)
    header = list_header()
    lines = [s("bold", header), s("dim", "-" * len(header))]
    lines.extend(format_list_row(i) for i in items)
    lines.extend(["", s("dim", LIST_FOOTER)])
    return lines


def listed_json(item: ListedSession) -> dict[str, object]:
    """One ``list --json`` object: the doctor's main.db columns raw, the VM name, the
    formatted cells, the ledger."""
    r = item.row
    obj: dict[str, object] = asdict(r)
    obj["name"] = item.name
    obj["total_tokens"] = r.total_tokens
    obj["has_ledger"] = item.has_ledger
    obj["ledger_dir"] = str(item.directory) if item.has_ledger and item.directory is not None else None
    obj["formatted"] = {
        "created": format_created(r.created_at),
        "duration": format_duration(r.created_at, r.stopped_at, r.status),
        "cost": f"${r.total_estimated_cost:.2f}",
        "net": str(r.total_requests),
        "tokens": str(r.total_tokens),
        "tool": str(r.total_tool_calls),
        "fs": str(r.total_file_events),
    }
    return obj


# --- check's "Recent sessions:" --------------------------------------------------------------

def _recent_table(rows: Sequence[SessionRow], with_usage: bool) -> tuple[list[str], list[list[Any]]]:
    columns = ["id", "mode", "status", "created_at", "requests", "in_tokens", "out_tokens", "cost"]
    if with_usage:
        columns += ["tools", "files"]
    out: list[list[Any]] = []
    for r in rows:
        line: list[Any] = [sanitize(r.id), sanitize(r.mode), sanitize(r.status), sanitize(r.created_at),
                             f"{r.allowed_requests}/{r.total_requests}",
                             r.total_input_tokens, r.total_output_tokens, f"${r.total_estimated_cost:.4f}"]
        if with_usage:
            line += [r.total_tool_calls, r.total_file_events]
        out.append(line)
    return columns, out


def recent_lines(rows: Sequence[SessionRow], with_usage: bool, colour: bool = False) -> list[str]:
    """The doctor's "Recent sessions:" table (``with_usage``: the tools and files columns of
    ``check --list``), after a blank line."""
    s = Style(colour)
    out = ["", s("bold", "Recent sessions:")]
    columns, cells = _recent_table(rows, with_usage)
    render_table(out, s, columns, cells)
    return out


def recent_json(row: SessionRow) -> dict[str, Any]:
    """One session of ``check --list --json``: main.db's columns exactly, and the VM name."""
    # Capsem's main.db records no name: it comes from the run directory or capsem-core's sidecar.
    return {"id": row.id, "name": vm_name(row.id), "mode": row.mode, "status": row.status,
            "created_at": row.created_at, "stopped_at": row.stopped_at,
            "total_requests": row.total_requests, "allowed_requests": row.allowed_requests,
            "denied_requests": row.denied_requests, "total_input_tokens": row.total_input_tokens,
            "total_output_tokens": row.total_output_tokens, "total_estimated_cost": row.total_estimated_cost,
            "total_tool_calls": row.total_tool_calls, "total_file_events": row.total_file_events}


__all__ = ["LIST_FOOTER", "format_created", "format_duration", "format_list_row", "list_header", "list_lines",
           "listed_json", "recent_json", "recent_lines"]
