"""The three mixes a sample can be (realistic, small, large): how long traces run, which tools
agents reach for, how big bodies get, and what a sample writes by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from capsem_core.sample.units import MIB

Mix = Literal["realistic", "small", "large"]
MIXES: tuple[str, ...] = ("realistic", "small", "large")

# What a sample writes when neither --bodies nor --raw-bytes is given.
DEFAULT_TARGETS: dict[str, tuple[int | None, int | None]] = {
    "realistic": (None, 16 << 20),
    "small": (100_000, None),
    "large": (None, 256 << 20),
}


@dataclass(frozen=True)
class Profile:
    """How one mix of sessions behaves; every range is drawn from per use."""

    turns: tuple[int, int]              # user turns per trace
    steps: tuple[int, int]              # model calls per turn, at most
    tools: tuple[int, int]              # tool uses per tool-using model call
    tool_weights: tuple[tuple[str, float], ...]
    result_bytes: tuple[int, int]       # tool output size, log-uniform
    file_bytes: tuple[int, int]         # Read / Write / fetched page size, log-uniform
    download_bytes: tuple[int, int]
    download_p: float
    reply_sentences: tuple[int, int]
    thinking_sentences: tuple[int, int]
    system_bytes: int
    tool_desc_bytes: int
    max_history: int                    # compact the conversation past this many bytes
    tiny: bool                          # tool bodies and payloads cut to 100-300 bytes
    api_exec_p: float                   # chance of an exec-API command between traces
    think_time: tuple[float, float]     # seconds between user turns
    delta_width: int                    # characters per SSE delta
    fs_window: int                      # file-monitor events per scan before overflow


PROFILES: dict[str, Profile] = {
    "realistic": Profile(
        turns=(1, 4), steps=(2, 7), tools=(1, 3),
        tool_weights=(("shell", .25), ("read", .2), ("edit", .12), ("write", .05), ("grep", .08),
                      ("glob", .05), ("web", .05), ("todo", .04), ("mcp_search", .06), ("mcp_file", .04),
                      ("builtin_exec", .05), ("builtin_snapshot", .01)),
        result_bytes=(120, 12_000), file_bytes=(800, 24_000), download_bytes=(20_000, 600_000),
        download_p=.05, reply_sentences=(1, 8), thinking_sentences=(1, 6), system_bytes=9000,
        tool_desc_bytes=500, max_history=600_000, tiny=False, api_exec_p=.3,
        think_time=(8.0, 240.0), delta_width=28, fs_window=256),
    "small": Profile(
        turns=(1, 1), steps=(2, 3), tools=(10, 20),
        tool_weights=(("builtin_exec", .32), ("mcp_search", .18), ("mcp_file", .1), ("grep", .1),
                      ("glob", .1), ("shell", .1), ("todo", .05), ("edit", .05)),
        result_bytes=(100, 300), file_bytes=(100, 300), download_bytes=(0, 0), download_p=0.0,
        reply_sentences=(1, 2), thinking_sentences=(0, 1), system_bytes=1200, tool_desc_bytes=100,
        max_history=40_000, tiny=True, api_exec_p=.7, think_time=(1.0, 20.0), delta_width=32,
        fs_window=64),
    "large": Profile(
        turns=(2, 5), steps=(4, 10), tools=(1, 3),
        tool_weights=(("read", .3), ("write", .15), ("shell", .2), ("web", .1), ("mcp_file", .1),
                      ("grep", .05), ("edit", .05), ("builtin_exec", .03), ("mcp_search", .02)),
        result_bytes=(8_000, 400_000), file_bytes=(30_000, 1_500_000),
        download_bytes=(400_000, 4_000_000), download_p=.25, reply_sentences=(3, 20),
        thinking_sentences=(2, 12), system_bytes=16_000, tool_desc_bytes=1200,
        max_history=6 * MIB, tiny=False, api_exec_p=.1, think_time=(10.0, 300.0),
        delta_width=64, fs_window=256),
}
