"""Deterministic, realistic sample ledgers and whole ``CAPSEM_HOME`` layouts.

This module owns the bundled sample data every other part of capsem-core runs on:

* ``write_sample_ledger`` writes one session ledger (``session.db`` + ``session.bodies``)
  through ``LedgerWriter``: AI agent traces against Anthropic (``/v1/messages``), OpenAI
  (``/v1/chat/completions``) and Google (``/v1beta/models/...:streamGenerateContent``) whose
  JSON requests carry the whole conversation so far, SSE responses in each provider's event
  shapes, native / MCP / built-in tool calls and their responses on the identity graph
  (trace -> turn -> model call -> tool call id), the HTTP, DNS, file, process, audit,
  credential, transport and security rows around them, and every body Capsem archives.
* ``write_sample_home`` lays out a whole Capsem home: ephemeral ledgers in
  ``run/sessions/<id>/``, named persistent VMs in ``run/persistent/<name>/``, ``main.db``
  with a row per session in every status, rolled up where Capsem rolls up.
* the ``sample`` command of ``capsem-ledger``.

Everything is a pure function of the seed: one ``random.Random`` drives every choice and a
fake clock (advanced by realistic durations, also handed to the writer) stamps every row,
so the same seed gives the same rows and a byte-identical ``session.bodies``.

Text is cheap by construction: sentences, code lines and command output lines are drawn
once from fixed pools (Zipf-weighted, so common ones repeat the way real sessions repeat)
and joined; nothing is generated character by character.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import stat
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

from capsem_core import db as _db
from capsem_core._native._blake3 import hexdigest as _b3hex
from capsem_core.errors import LedgerError
from capsem_core.writer import Body, LedgerWriter
from capsem_core.writer import ledger_timestamp as ledger_time
from capsem_core.cli.terminal import sanitize

__all__ = [
    "HomeSession",
    "HomeSummary",
    "MIXES",
    "SampleSummary",
    "add_sample_arguments",
    "parse_size",
    "run_sample",
    "write_sample_home",
    "write_sample_ledger",
]

Mix = Literal["realistic", "small", "large"]
MIXES: tuple[str, ...] = ("realistic", "small", "large")

# 2025-06-02T09:00:00Z: a fixed default start so the default sample is reproducible.
DEFAULT_START_TIME = 1748854800.0

# What a sample writes when neither --bodies nor --raw-bytes is given.
_DEFAULT_TARGETS: dict[str, tuple[int | None, int | None]] = {
    "realistic": (None, 16 << 20),
    "small": (100_000, None),
    "large": (None, 256 << 20),
}

KIB = 1024
MIB = 1024 * 1024

# The guest cuts exec output to 1 KiB before it reaches the ledger (facts §1.3).
EXEC_OUTPUT_CAP = 1024
# Display columns (*_preview) are capped at 2 KiB.
PREVIEW_CAP = 2048
# A body the writer would cut (10 MiB) is never generated: histories are compacted first.
MAX_GENERATED_BODY = 8 * MIB

# --------------------------------------------------------------------------------------------
# Text pools. Built once, from a fixed seed, independent of the session seed: they are the
# "language" of every sample; the session seed only decides what is said.
# --------------------------------------------------------------------------------------------

_WORDS = """
the a an to of and in is that for it on with as this be are by we not or from at if
when then so but all any each every some more most less other only just also still
can will should must may might would could does did has have had was were been being
file files function test tests module value values return returns error errors config
build run runs running session ledger body bodies block blocks segment index row rows
table tables column query schema writer reader archive hash digest check verify result
results output input request response stream event events trace turn model tool tools
call calls provider token tokens cost path paths directory process command exit code
line lines change changes patch diff commit branch merge review comment issue issues
type types class method field argument arguments option options default flag flags
cache memory disk size length offset limit bound bounds buffer parse parser format
status state update create delete read write open close flush sync commit rollback
first last next previous new old same different whole part empty full small large
fast slow simple clear correct wrong broken fixed missing found expected actual
because since while until after before during inside outside between against without
need needs want wants use uses used make makes made look looks see shows show keep
add adds added remove removes removed move moves rename fix fixes handle handles
user users agent agents system prompt context history message messages reply answer
server client network domain policy rule rules decision allow block ask denied allowed
data database record records entry entries list lists map key keys item items count
number numbers string strings bytes byte text json header headers payload preview
now here there where which what who how why yes no ok done good better best work
works working worked step steps plan plans idea approach problem problems case cases
time timeout retry again once twice often never always usually probably likely
python rust sqlite cython numpy pytest docker linux shell script scripts package
install installed version versions release dependency dependencies import imports
""".split()

_IDENT_NOUNS = """
ledger block segment body index row table writer reader archive digest cursor span
extent session trace turn model tool call provider token path config cache buffer
parser record entry item payload header stream event policy rule decision client
server request response result report summary counter metric batch queue worker
""".split()
_IDENT_VERBS = """
read write parse build check verify load store open close flush sync scan seal stage
append insert update delete fetch resolve compute merge split encode decode hash
""".split()
_MODULES = """
os sys json re time sqlite3 pathlib typing dataclasses itertools functools collections
argparse logging hashlib zlib struct asyncio subprocess shutil tempfile contextlib
""".split()
_ERRORS = "ValueError KeyError TypeError RuntimeError OSError LedgerError IndexError".split()


def _zipf_cum(n: int, s: float) -> list[float]:
    return list(accumulate(1.0 / (i + 1) ** s for i in range(n)))


class _Pools:
    """Fixed pools of sentences, code lines and command-output lines, with Zipf weights."""

    def __init__(self) -> None:
        r = random.Random(0x5A4D_91E)
        words = _WORDS
        self.sentences: list[str] = []
        for _ in range(2400):
            n = r.randint(5, 17)
            ws = [words[min(int(r.paretovariate(1.1)) - 1, len(words) - 1)] if r.random() < 0.3
                  else r.choice(words) for _ in range(n)]
            if r.random() < 0.18:
                ws.insert(r.randrange(len(ws)), f"`{self._ident(r)}`")
            s = " ".join(ws)
            self.sentences.append(s[0].upper() + s[1:] + r.choice(".....?:"))
        self.sentence_cum = _zipf_cum(len(self.sentences), 1.05)
        self.avg_sentence = sum(len(s) + 1 for s in self.sentences) / len(self.sentences)

        self.code: list[str] = [self._code_line(r) for _ in range(3000)]
        self.code_cum = _zipf_cum(len(self.code), 0.9)
        self.avg_code = sum(len(s) + 1 for s in self.code) / len(self.code)

        self.paths: list[str] = []
        tops = ["src/capsem_core", "src/capsem_core/cli", "tests", "tests/golden", "docs",
                "bench", "scripts", "cext", "examples", "tools"]
        for _ in range(260):
            top = r.choice(tops)
            ext = r.choice([".py", ".py", ".py", ".md", ".c", ".h", ".pyx", ".toml", ".json"])
            self.paths.append(f"{top}/{r.choice(_IDENT_VERBS)}_{r.choice(_IDENT_NOUNS)}{ext}")
        self.paths = sorted(set(self.paths))

        self.shell: dict[str, list[str]] = {
            "pytest": [f"tests/test_{r.choice(_IDENT_NOUNS)}.py::test_{r.choice(_IDENT_VERBS)}_"
                       f"{r.choice(_IDENT_NOUNS)} {r.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'])}"
                       f" [{r.randint(1, 100):3d}%]" for _ in range(400)],
            "git": [f"{r.getrandbits(28):07x} {self.sentences[r.randrange(300)][:60]}" for _ in range(300)],
            "ls": [f"-rw-r--r-- 1 dev dev {r.randint(80, 90000):6d} Jun {r.randint(1, 30):2d} "
                   f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d} {r.choice(self.paths).rsplit('/', 1)[-1]}"
                   for _ in range(300)],
            "pip": [f"{r.choice(['Collecting', 'Downloading', 'Requirement already satisfied:', 'Using cached'])} "
                    f"{r.choice(_IDENT_NOUNS)}{r.choice(['', '-py', '-core', 'lib'])}=="
                    f"{r.randint(0, 5)}.{r.randint(0, 30)}.{r.randint(0, 9)}" for _ in range(200)],
            "grep": [f"{r.choice(self.paths)}:{r.randint(1, 900)}:{self.code[r.randrange(400)].strip()}"
                     for _ in range(400)],
            "build": [f"{r.choice(['-- ', '[ 12%] ', '[ 50%] ', '[100%] ', 'warning: ', 'note: '])}"
                      f"{self.sentences[r.randrange(200)][:70]}" for _ in range(200)],
        }
        self.shell_cum = {k: _zipf_cum(len(v), 0.8) for k, v in self.shell.items()}

        self.html_head = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>'
                          'Documentation</title><link rel="stylesheet" href="/static/site.css">'
                          '</head><body><nav class="top"><a href="/">Home</a> <a href="/docs/">Docs</a>'
                          ' <a href="/api/">API</a> <a href="/blog/">Blog</a></nav><main>')
        self.html_tail = '</main><footer class="site">Built with care.</footer></body></html>'

    @staticmethod
    def _ident(r: random.Random) -> str:
        return f"{r.choice(_IDENT_VERBS)}_{r.choice(_IDENT_NOUNS)}"

    def _code_line(self, r: random.Random) -> str:
        noun, noun2 = r.choice(_IDENT_NOUNS), r.choice(_IDENT_NOUNS)
        fn = self._ident(r)
        cls = noun.capitalize() + noun2.capitalize()
        ind = "    " * r.choice([0, 1, 1, 2, 2, 2, 3])
        forms = [
            f"def {fn}({noun}, {noun2}=None):",
            f"{ind}{noun} = {fn}({noun2})",
            f"{ind}if {noun} is None:",
            f"{ind}return {noun}",
            f"{ind}for {noun} in {noun2}s:",
            f"{ind}{noun}s.append({fn}({noun2}))",
            f"import {r.choice(_MODULES)}",
            f"from {r.choice(_MODULES)} import {noun}",
            f"class {cls}:",
            f"{ind}# {r.choice(_WORDS)} {r.choice(_WORDS)} {noun} {r.choice(_WORDS)} {noun2}",
            f'{ind}raise {r.choice(_ERRORS)}(f"{noun} {r.choice(_WORDS)} {{{noun2}!r}}")',
            f"{ind}assert {noun}.{noun2} == {r.randint(0, 4096)}",
            f"{ind}self.{noun} = {noun2}",
            f"{ind}with open({noun}, 'rb') as {noun2}:",
            "",
        ]
        return r.choice(forms)

    # --- drawing text -----------------------------------------------------------------------

    def prose(self, r: random.Random, nbytes: int) -> str:
        k = max(1, int(nbytes / self.avg_sentence) + 1)
        return " ".join(r.choices(self.sentences, cum_weights=self.sentence_cum, k=k))

    def sentences_k(self, r: random.Random, k: int) -> str:
        return " ".join(r.choices(self.sentences, cum_weights=self.sentence_cum, k=max(1, k)))

    def code_text(self, r: random.Random, nbytes: int) -> str:
        k = max(1, int(nbytes / self.avg_code) + 1)
        return "\n".join(r.choices(self.code, cum_weights=self.code_cum, k=k))

    def shell_lines(self, r: random.Random, kind: str, k: int) -> str:
        return "\n".join(r.choices(self.shell[kind], cum_weights=self.shell_cum[kind], k=max(1, k)))


_POOLS: _Pools | None = None


def _pools() -> _Pools:
    global _POOLS
    if _POOLS is None:
        _POOLS = _Pools()
    return _POOLS


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


# One encoder, made once: json.dumps with non-default options builds a new encoder per call.
_jdump: Callable[[object], str] = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# A JSON string literal (quotes included) of a str.
_jstr: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


def _cap(s: str | None, n: int = PREVIEW_CAP) -> str | None:
    if s is None:
        return None
    return s if len(s) <= n else s[:n]


def _cap_bytes_text(b: bytes, n: int = PREVIEW_CAP) -> str:
    return b[:n].decode("utf-8", "replace")


def _textual(content_type: str | None) -> bool:
    """Whether a body of this type gets a text preview (archives and packs do not)."""
    return content_type is not None and not content_type.startswith(("application/octet-stream", "application/x-git"))


def _fit(text: str, lo: int, hi: int, filler: str) -> str:
    """Pad with ``filler`` (repeated) or cut so the UTF-8 length is within [lo, hi]."""
    b = text.encode()
    if len(b) > hi:
        return b[:hi].decode("utf-8", "ignore")
    while len(b) < lo:
        b += (" " + filler).encode()
    return b[:hi].decode("utf-8", "ignore")


def parse_size(text: str) -> int:
    """A byte count like ``1000``, ``64K``, ``64M``, ``1G``, ``1.5GiB`` (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 1000, 64K, 64M, 1G)")
    scale = {"": 1, "k": KIB, "m": MIB, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise ValueError(f"a size must be positive: {text!r}")
    return value


# --------------------------------------------------------------------------------------------
# Providers: request encodings (the whole history in every request) and SSE response shapes
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Provider:
    name: str
    domain: str
    path: str
    query: str | None
    model: str
    process: str
    user_agent: str
    price_in: float       # USD per uncached input token
    price_cache: float    # USD per cache-read input token
    price_out: float      # USD per output (and thinking) token
    key_header: str


_PROVIDERS: dict[str, _Provider] = {
    "anthropic": _Provider("anthropic", "api.anthropic.com", "/v1/messages", None,
                           "claude-sonnet-4-20250514", "claude", "claude-cli/1.0.51 (external, cli)",
                           3e-6, 0.3e-6, 15e-6, "x-api-key"),
    "openai": _Provider("openai", "api.openai.com", "/v1/chat/completions", None,
                        "gpt-4.1-2025-04-14", "codex", "codex_cli_rs/0.2.0",
                        2e-6, 0.5e-6, 8e-6, "authorization"),
    "google": _Provider("google", "generativelanguage.googleapis.com",
                        "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "alt=sse",
                        "gemini-2.5-pro", "gemini", "GeminiCLI/0.1.12 (linux; x64)",
                        1.25e-6, 0.31e-6, 10e-6, "x-goog-api-key"),
}

# Tool kinds and the name each agent gives them. MCP tools are named by the MCP server's
# tool name in tool_calls; the model sees the agent's prefixed name.
_TOOL_NAMES: dict[str, dict[str, str]] = {
    "anthropic": {"shell": "Bash", "read": "Read", "edit": "Edit", "write": "Write", "grep": "Grep",
                  "glob": "Glob", "web": "WebFetch", "todo": "TodoWrite",
                  "mcp_search": "mcp__github__search_issues", "mcp_file": "mcp__github__get_file_contents",
                  "builtin_exec": "mcp__capsem__exec", "builtin_snapshot": "mcp__capsem__snapshot"},
    "openai": {"shell": "shell", "read": "read_file", "edit": "apply_patch", "write": "write_file",
               "grep": "grep_files", "glob": "list_dir", "web": "web_fetch", "todo": "update_plan",
               "mcp_search": "github__search_issues", "mcp_file": "github__get_file_contents",
               "builtin_exec": "capsem__exec", "builtin_snapshot": "capsem__snapshot"},
    "google": {"shell": "run_shell_command", "read": "read_file", "edit": "replace", "write": "write_file",
               "grep": "search_file_content", "glob": "glob", "web": "web_fetch", "todo": "write_todos",
               "mcp_search": "search_issues", "mcp_file": "get_file_contents",
               "builtin_exec": "exec", "builtin_snapshot": "snapshot"},
}
_MCP_TOOL = {"mcp_search": ("github", "search_issues"), "mcp_file": ("github", "get_file_contents"),
             "builtin_exec": ("capsem", "exec"), "builtin_snapshot": ("capsem", "snapshot")}
_TOOL_PARAMS: dict[str, dict[str, str]] = {
    "shell": {"command": "string", "description": "string", "timeout": "number"},
    "read": {"file_path": "string", "offset": "number", "limit": "number"},
    "edit": {"file_path": "string", "old_string": "string", "new_string": "string"},
    "write": {"file_path": "string", "content": "string"},
    "grep": {"pattern": "string", "path": "string", "glob": "string"},
    "glob": {"pattern": "string", "path": "string"},
    "web": {"url": "string", "prompt": "string"},
    "todo": {"todos": "array"},
    "mcp_search": {"owner": "string", "repo": "string", "query": "string"},
    "mcp_file": {"owner": "string", "repo": "string", "path": "string"},
    "builtin_exec": {"command": "string"},
    "builtin_snapshot": {"name": "string"},
}


@dataclass
class _ToolUse:
    call_id: str
    kind: str
    name: str              # what the model called it
    args: dict[str, Any]
    args_json: str
    index: int
    detail: str = ""          # what kind of command a shell tool runs


@dataclass
class _ToolResult:
    call_id: str
    name: str
    content: str
    is_error: bool


@dataclass
class _Reply:
    thinking: str | None
    text: str | None
    uses: list[_ToolUse]
    stop_reason: str


_ERR_FLAG = ',"is_error":true'


class _Conversation:
    """One agent conversation in one provider's request encoding.

    Messages are kept as encoded JSON fragments so a request, which carries the whole
    history, is one join however long the history is."""

    def __init__(self, prov: _Provider, system: str, tools: list[tuple[str, str, str]], user_id: str):
        self.prov = prov
        self.system = system
        self.msgs: list[bytes] = []
        self.msg_bytes = 0
        self.n_tools = len(tools)
        name = prov.name
        if name == "anthropic":
            tools_json = ",".join(
                f'{{"name":{_jstr(t)},"description":{_jstr(d)},"input_schema":{p}}}' for t, d, p in tools)
            self.prefix = (f'{{"model":{_jstr(prov.model)},"max_tokens":32000,"stream":true,'
                           f'"system":[{{"type":"text","text":{_jstr(system)},'
                           f'"cache_control":{{"type":"ephemeral"}}}}],"tools":[{tools_json}],'
                           f'"metadata":{{"user_id":{_jstr(user_id)}}},"messages":[').encode()
            self.suffix = b"]}"
        elif name == "openai":
            tools_json = ",".join(
                f'{{"type":"function","function":{{"name":{_jstr(t)},"description":{_jstr(d)},'
                f'"parameters":{p}}}}}' for t, d, p in tools)
            self.prefix = (f'{{"model":{_jstr(prov.model)},"stream":true,"stream_options":'
                           f'{{"include_usage":true}},"parallel_tool_calls":true,"tools":[{tools_json}],'
                           f'"messages":[{{"role":"system","content":{_jstr(system)}}}').encode()
            self.suffix = b"]}"
        else:
            decls = ",".join(f'{{"name":{_jstr(t)},"description":{_jstr(d)},"parameters":{p}}}'
                             for t, d, p in tools)
            self.prefix = (f'{{"systemInstruction":{{"parts":[{{"text":{_jstr(system)}}}]}},'
                           f'"tools":[{{"functionDeclarations":[{decls}]}}],"generationConfig":'
                           f'{{"temperature":0,"topP":1,"thinkingConfig":{{"includeThoughts":true,'
                           f'"thinkingBudget":-1}}}},"contents":[').encode()
            self.suffix = b"]}"

    def _add(self, fragment: str) -> None:
        b = fragment.encode()
        self.msgs.append(b)
        self.msg_bytes += len(b) + 1

    @property
    def messages_count(self) -> int:
        return len(self.msgs) + (1 if self.prov.name == "openai" else 0)

    def request(self) -> bytes:
        if self.prov.name == "openai":
            return self.prefix + b"," + b",".join(self.msgs) + self.suffix if self.msgs else self.prefix + self.suffix
        return self.prefix + b",".join(self.msgs) + self.suffix

    def add_user(self, text: str) -> None:
        n = self.prov.name
        if n == "anthropic":
            self._add(f'{{"role":"user","content":[{{"type":"text","text":{_jstr(text)}}}]}}')
        elif n == "openai":
            self._add(f'{{"role":"user","content":{_jstr(text)}}}')
        else:
            self._add(f'{{"role":"user","parts":[{{"text":{_jstr(text)}}}]}}')

    def add_reply(self, reply: _Reply, signature: str) -> None:
        n = self.prov.name
        if n == "anthropic":
            parts = []
            if reply.thinking:
                parts.append(f'{{"type":"thinking","thinking":{_jstr(reply.thinking)},"signature":"{signature}"}}')
            if reply.text:
                parts.append(f'{{"type":"text","text":{_jstr(reply.text)}}}')
            parts += [f'{{"type":"tool_use","id":"{u.call_id}","name":{_jstr(u.name)},"input":{u.args_json}}}'
                      for u in reply.uses]
            self._add(f'{{"role":"assistant","content":[{",".join(parts)}]}}')
        elif n == "openai":
            content = _jstr(reply.text) if reply.text else "null"
            if reply.uses:
                calls = ",".join(f'{{"id":"{u.call_id}","type":"function","function":{{"name":{_jstr(u.name)},'
                                 f'"arguments":{_jstr(u.args_json)}}}}}' for u in reply.uses)
                self._add(f'{{"role":"assistant","content":{content},"tool_calls":[{calls}]}}')
            else:
                self._add(f'{{"role":"assistant","content":{content}}}')
        else:
            parts = []
            if reply.thinking:
                parts.append(f'{{"text":{_jstr(reply.thinking)},"thought":true}}')
            if reply.text:
                parts.append(f'{{"text":{_jstr(reply.text)}}}')
            parts += [f'{{"functionCall":{{"id":"{u.call_id}","name":{_jstr(u.name)},"args":{u.args_json}}}}}'
                      for u in reply.uses]
            self._add(f'{{"role":"model","parts":[{",".join(parts)}]}}')

    def add_results(self, results: Sequence[_ToolResult]) -> None:
        n = self.prov.name
        if n == "anthropic":
            parts = ",".join(f'{{"type":"tool_result","tool_use_id":"{r.call_id}","content":{_jstr(r.content)}'
                             + (_ERR_FLAG if r.is_error else "") + "}" for r in results)
            self._add(f'{{"role":"user","content":[{parts}]}}')
        elif n == "openai":
            for r in results:
                self._add(f'{{"role":"tool","tool_call_id":"{r.call_id}","content":{_jstr(r.content)}}}')
        else:
            parts = ",".join(f'{{"functionResponse":{{"id":"{r.call_id}","name":{_jstr(r.name)},'
                             f'"response":{{"{"error" if r.is_error else "output"}":{_jstr(r.content)}}}}}}}'
                             for r in results)
            self._add(f'{{"role":"user","parts":[{parts}]}}')

    def compact(self, summary: str) -> None:
        """What agents do near the context limit: the history becomes one summary message."""
        self.msgs.clear()
        self.msg_bytes = 0
        self.add_user("This session is being continued from a previous conversation that ran out of "
                      "context. The conversation is summarized below:\n" + summary)


def _pieces(s: str, width: int) -> list[str]:
    return [s[i:i + width] for i in range(0, len(s), width)] if s else []


def _sse_anthropic(msg_id: str, model: str, usage: dict[str, int], reply: _Reply, signature: str,
                   width: int) -> bytes:
    out: list[str] = []
    ev = out.append
    start = {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage["input"] - usage["cache_read"],
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": usage["cache_read"],
                  "output_tokens": 1, "service_tier": "standard"}}}
    ev(f"event: message_start\ndata: {_jdump(start)}\n\n")
    idx = 0
    if reply.thinking:
        ev(f'event: content_block_start\ndata: {{"type":"content_block_start","index":{idx},'
           f'"content_block":{{"type":"thinking","thinking":""}}}}\n\n')
        ev('event: ping\ndata: {"type": "ping"}\n\n')
        for p in _pieces(reply.thinking, width):
            ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},'
               f'"delta":{{"type":"thinking_delta","thinking":{_jstr(p)}}}}}\n\n')
        ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},'
           f'"delta":{{"type":"signature_delta","signature":"{signature}"}}}}\n\n')
        ev(f'event: content_block_stop\ndata: {{"type":"content_block_stop","index":{idx}}}\n\n')
        idx += 1
    if reply.text:
        ev(f'event: content_block_start\ndata: {{"type":"content_block_start","index":{idx},'
           f'"content_block":{{"type":"text","text":""}}}}\n\n')
        for p in _pieces(reply.text, width):
            ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},'
               f'"delta":{{"type":"text_delta","text":{_jstr(p)}}}}}\n\n')
        ev(f'event: content_block_stop\ndata: {{"type":"content_block_stop","index":{idx}}}\n\n')
        idx += 1
    for u in reply.uses:
        ev(f'event: content_block_start\ndata: {{"type":"content_block_start","index":{idx},'
           f'"content_block":{{"type":"tool_use","id":"{u.call_id}","name":{_jstr(u.name)},"input":{{}}}}}}\n\n')
        ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},'
           f'"delta":{{"type":"input_json_delta","partial_json":""}}}}\n\n')
        for p in _pieces(u.args_json, width):
            ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},'
               f'"delta":{{"type":"input_json_delta","partial_json":{_jstr(p)}}}}}\n\n')
        ev(f'event: content_block_stop\ndata: {{"type":"content_block_stop","index":{idx}}}\n\n')
        idx += 1
    ev(f'event: message_delta\ndata: {{"type":"message_delta","delta":{{"stop_reason":"{reply.stop_reason}",'
       f'"stop_sequence":null}},"usage":{{"output_tokens":{usage["output"]}}}}}\n\n')
    ev('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return "".join(out).encode()


def _sse_openai(chat_id: str, created: int, model: str, fingerprint: str, usage: dict[str, int],
                reply: _Reply, width: int) -> bytes:
    head = (f'data: {{"id":"{chat_id}","object":"chat.completion.chunk","created":{created},'
            f'"model":"{model}","service_tier":"default","system_fingerprint":"{fingerprint}","choices":[')
    tail = "]}\n\n"
    out: list[str] = [head + '{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
                      '"logprobs":null,"finish_reason":null}' + tail]
    ev = out.append
    for p in _pieces(reply.text or "", width):
        ev(f'{head}{{"index":0,"delta":{{"content":{_jstr(p)}}},"logprobs":null,"finish_reason":null}}{tail}')
    for i, u in enumerate(reply.uses):
        ev(f'{head}{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"id":"{u.call_id}","type":"function",'
           f'"function":{{"name":{_jstr(u.name)},"arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}{tail}')
        for p in _pieces(u.args_json, width):
            ev(f'{head}{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"function":{{"arguments":{_jstr(p)}}}}}]}},'
               f'"logprobs":null,"finish_reason":null}}{tail}')
    ev(f'{head}{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{reply.stop_reason}"}}{tail}')
    ev(f'data: {{"id":"{chat_id}","object":"chat.completion.chunk","created":{created},"model":"{model}",'
       f'"service_tier":"default","system_fingerprint":"{fingerprint}","choices":[],"usage":'
       f'{{"prompt_tokens":{usage["input"]},"completion_tokens":{usage["output"]},'
       f'"total_tokens":{usage["input"] + usage["output"]},"prompt_tokens_details":'
       f'{{"cached_tokens":{usage["cache_read"]},"audio_tokens":0}},"completion_tokens_details":'
       f'{{"reasoning_tokens":{usage["thinking"]},"audio_tokens":0,"accepted_prediction_tokens":0,'
       f'"rejected_prediction_tokens":0}}}}}}\n\n')
    ev("data: [DONE]\n\n")
    return "".join(out).encode()


def _sse_google(response_id: str, model: str, usage: dict[str, int], reply: _Reply, width: int) -> bytes:
    pin = usage["input"]
    meta_run = (f'"usageMetadata":{{"promptTokenCount":{pin},"totalTokenCount":{pin},'
                f'"promptTokensDetails":[{{"modality":"TEXT","tokenCount":{pin}}}]}},'
                f'"modelVersion":"{model}","responseId":"{response_id}"')
    out: list[str] = []
    ev = out.append
    for p in _pieces(reply.thinking or "", width):
        ev(f'data: {{"candidates":[{{"content":{{"parts":[{{"text":{_jstr(p)},"thought":true}}],'
           f'"role":"model"}},"index":0}}],{meta_run}}}\r\n\r\n')
    for p in _pieces(reply.text or "", width):
        ev(f'data: {{"candidates":[{{"content":{{"parts":[{{"text":{_jstr(p)}}}],"role":"model"}},'
           f'"index":0}}],{meta_run}}}\r\n\r\n')
    calls = ",".join(f'{{"functionCall":{{"id":"{u.call_id}","name":{_jstr(u.name)},"args":{u.args_json}}}}}'
                     for u in reply.uses) or '{"text":""}'
    total = pin + usage["output"]
    ev(f'data: {{"candidates":[{{"content":{{"parts":[{calls}],"role":"model"}},"finishReason":'
       f'"{reply.stop_reason}","index":0}}],"usageMetadata":{{"promptTokenCount":{pin},'
       f'"candidatesTokenCount":{usage["output"] - usage["thinking"]},"totalTokenCount":{total},'
       f'"cachedContentTokenCount":{usage["cache_read"]},"promptTokensDetails":[{{"modality":"TEXT",'
       f'"tokenCount":{pin}}}],"thoughtsTokenCount":{usage["thinking"]}}},"modelVersion":"{model}",'
       f'"responseId":"{response_id}"}}\r\n\r\n')
    return "".join(out).encode()


# --------------------------------------------------------------------------------------------
# Mix profiles
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Profile:
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


_PROFILES: dict[str, _Profile] = {
    "realistic": _Profile(
        turns=(1, 4), steps=(2, 7), tools=(1, 3),
        tool_weights=(("shell", .25), ("read", .2), ("edit", .12), ("write", .05), ("grep", .08),
                      ("glob", .05), ("web", .05), ("todo", .04), ("mcp_search", .06), ("mcp_file", .04),
                      ("builtin_exec", .05), ("builtin_snapshot", .01)),
        result_bytes=(120, 12_000), file_bytes=(800, 24_000), download_bytes=(20_000, 600_000),
        download_p=.05, reply_sentences=(1, 8), thinking_sentences=(1, 6), system_bytes=9000,
        tool_desc_bytes=500, max_history=600_000, tiny=False, api_exec_p=.3,
        think_time=(8.0, 240.0), delta_width=28, fs_window=256),
    "small": _Profile(
        turns=(1, 1), steps=(2, 3), tools=(10, 20),
        tool_weights=(("builtin_exec", .32), ("mcp_search", .18), ("mcp_file", .1), ("grep", .1),
                      ("glob", .1), ("shell", .1), ("todo", .05), ("edit", .05)),
        result_bytes=(100, 300), file_bytes=(100, 300), download_bytes=(0, 0), download_p=0.0,
        reply_sentences=(1, 2), thinking_sentences=(0, 1), system_bytes=1200, tool_desc_bytes=100,
        max_history=40_000, tiny=True, api_exec_p=.7, think_time=(1.0, 20.0), delta_width=32,
        fs_window=64),
    "large": _Profile(
        turns=(2, 5), steps=(4, 10), tools=(1, 3),
        tool_weights=(("read", .3), ("write", .15), ("shell", .2), ("web", .1), ("mcp_file", .1),
                      ("grep", .05), ("edit", .05), ("builtin_exec", .03), ("mcp_search", .02)),
        result_bytes=(8_000, 400_000), file_bytes=(30_000, 1_500_000),
        download_bytes=(400_000, 4_000_000), download_p=.25, reply_sentences=(3, 20),
        thinking_sentences=(2, 12), system_bytes=16_000, tool_desc_bytes=1200,
        max_history=6 * MIB, tiny=False, api_exec_p=.1, think_time=(10.0, 300.0),
        delta_width=64, fs_window=256),
}

_ALLOWED_DOMAINS = ("pypi.org", "files.pythonhosted.org", "github.com", "codeload.github.com",
                    "registry.npmjs.org", "docs.python.org", "sqlite.org", "api.githubcopilot.com")
_DENIED_DOMAINS = ("o4504.ingest.sentry.io", "api.segment.io", "http-intake.logs.datadoghq.com",
                   "pastebin.com")
_MCP_URL = ("api.githubcopilot.com", "/mcp/")


@dataclass
class _Ctx:
    """Where an event sits on the identity graph."""

    trace_id: str | None
    turn_id: str | None
    prov: _Provider | None = None
    model_call_id: int | None = None
    pid: int = 0


class _Counters:
    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.bodies = 0
        self.raw = 0

# (rule id, action, detection level, what it matches) -- the policy a sample session runs under.
_RULES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "net.allow.ai-providers": ("allow", "none", {"domain": [p.domain for p in _PROVIDERS.values()]}),
    "net.allow.dev-registries": ("allow", "none", {"domain": list(_ALLOWED_DOMAINS)}),
    "net.block.telemetry": ("block", "low", {"domain": list(_DENIED_DOMAINS[:3])}),
    "net.ask.paste-sites": ("ask", "medium", {"domain": ["pastebin.com"]}),
    "dns.allow.default": ("allow", "none", {"qname": "*"}),
    "dns.block.telemetry": ("block", "low", {"qname": list(_DENIED_DOMAINS[:3])}),
    "mcp.allow.github-read": ("allow", "informational",
                              {"server": "github", "tool": ["search_issues", "get_file_contents"]}),
    "mcp.log.protocol": ("allow", "informational", {"method": ["initialize", "tools/list"]}),
    "mcp.allow.capsem-builtin": ("allow", "none", {"server": "capsem"}),
    "model.allow.agents": ("allow", "none", {"provider": list(_PROVIDERS)}),
    "cred.rewrite.api-keys": ("rewrite", "informational", {"header": [p.key_header for p in _PROVIDERS.values()]}),
    "process.ask.git-push": ("ask", "medium", {"argv_prefix": ["git", "push"]}),
    "process.log.package-install": ("allow", "low", {"exe": ["pip", "npm"]}),
    "exec.allow.workspace": ("allow", "none", {"cwd": "/workspace/**"}),
    "file.flag.dotfiles": ("allow", "low", {"path": ["**/.env", "**/.git/config"]}),
}
_RULE_JSON: dict[str, str] = {
    rid: _jdump({"id": rid, "action": a, "detection_level": lvl, "match": m, "source": "profile:default"})
    for rid, (a, lvl, m) in _RULES.items()
}
_SHELL_CMDS: dict[str, tuple[str, ...]] = {
    "pytest": ("python3 -m pytest tests/ -q", "python3 -m pytest tests/test_writer.py -x -q",
               "python3 -m pytest -k verify -q"),
    "git": ("git status --short", "git log --oneline -n 20", "git diff --stat", "git push origin HEAD"),
    "ls": ("ls -la src/capsem_core", "ls tests", "find . -name '*.py' | head -50"),
    "pip": ("pip install zstandard", "pip install -e .", "pip install blake3 pytest-benchmark"),
    "build": ("scripts/dev-build", "make -j2", "cmake --build build"),
    "grep": ("grep -rn 'flush' src/", "rg -n 'segment' cext/", "grep -rn 'TODO' ."),
}
_EXE = {"pytest": "/usr/bin/python3", "git": "/usr/bin/git", "ls": "/usr/bin/ls", "pip": "/usr/local/bin/pip",
        "build": "/usr/bin/make", "grep": "/usr/bin/grep"}
_FS_TOP = "/workspace/capsem-core"


class _Session:
    """Generates one session's rows and bodies into a writer, in time order."""

    def __init__(self, writer: Any, body_cls: Any, *, seed: int, mix: str, start_time: float,
                 target_bodies: int | None, target_raw: int | None,
                 progress: Callable[[int, int], None] | None) -> None:
        self.w = writer
        self.Body = body_cls
        self.r = random.Random(seed)
        self.seed = seed
        self.p = _PROFILES[mix]
        self.pools = _pools()
        self.now = float(start_time)
        self.c = _Counters()
        self.target_bodies = target_bodies
        self.target_raw = target_raw
        self.progress = progress
        self._progress_at = (0, 0)
        r = self.r
        self.next_model_call_id = 1
        self.next_pid = 2000 + r.randrange(1000)
        self.exec_id = 0
        self.audit_session = r.randint(1, 40)
        self.dns_seen: dict[str, float] = {}
        self.open_connections: list[tuple[str, str]] = []
        self.network_id = "net-" + self.hexid(12)
        self.user_id = "user_" + self.hexid(64)
        self.creds = {name: "credential:blake3:" + _b3hex(f"sample key {name} {seed}".encode())
                      for name in _PROVIDERS}
        order = list(_PROVIDERS)
        r.shuffle(order)
        self.provider_queue = order
        self.seen_kinds: set[str] = set()
        self.items_seen: set[tuple[str, str, str]] = set()
        self.snapshot_n = 0
        self.jsonrpc_id = 0
        self.agent_specs: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
        kinds = [k for k, _ in self.p.tool_weights]
        self.kind_names = kinds
        self.kind_cum = list(accumulate(w for _, w in self.p.tool_weights))

    # --- basics -----------------------------------------------------------------------------

    def hexid(self, n: int) -> str:
        return f"{self.r.getrandbits(4 * n):0{n}x}"

    def eid(self) -> str:
        return f"{self.r.getrandbits(48):012x}"

    def b58(self, n: int) -> str:
        return "".join(self.r.choices(_B58, k=n))

    def alnum(self, n: int) -> str:
        return "".join(self.r.choices(_ALNUM, k=n))

    def tick(self, lo: float, hi: float) -> None:
        self.now += self.r.uniform(lo, hi)

    def ts(self) -> str:
        return ledger_time(self.now)

    def ms(self) -> int:
        return int(self.now * 1000)

    def logu(self, lo: int, hi: int) -> int:
        if hi <= lo:
            return lo
        return int(math.exp(self.r.uniform(math.log(max(lo, 1)), math.log(hi))))

    def new_pid(self) -> int:
        self.next_pid += self.r.randint(1, 9)
        return self.next_pid

    def done(self) -> bool:
        c = self.c
        return ((self.target_bodies is not None and c.bodies >= self.target_bodies)
                or (self.target_raw is not None and c.raw >= self.target_raw))

    def body(self, direction: str, data: bytes | None, event_type: str, content_type: str | None = None,
             original_bytes: int | None = None) -> Any:
        return self.Body(direction, data or b"", event_type, content_type, original_bytes)

    def insert(self, table: str, row: Mapping[str, object], bodies: Sequence[Any] = ()) -> None:
        kept = [b for b in bodies if b.data]
        c = self.c
        c.rows[table] = c.rows.get(table, 0) + 1
        for b in kept:
            c.bodies += 1
            c.raw += len(b.data)
        self.w.insert(table, row, kept)
        if self.progress is not None and (c.bodies - self._progress_at[0] >= 50_000
                                          or c.raw - self._progress_at[1] >= 128 * MIB):
            self._progress_at = (c.bodies, c.raw)
            self.progress(c.bodies, c.raw)

    def tiny(self, text: str) -> str:
        return _fit(text, 100, 300, self.pools.sentences[0])

    # --- security ledger --------------------------------------------------------------------

    def payload(self, ctx: _Ctx, event_id: str, event_type: str, fields: Mapping[str, object]) -> bytes:
        head = {"event_id": event_id, "event_type": event_type, "timestamp_unix_ms": self.ms(),
                "trace_id": ctx.trace_id}
        if not self.p.tiny:
            head["turn_id"] = ctx.turn_id
            head["session_network"] = self.network_id
        head.update(fields)
        return _jdump(head).encode()

    def secure(self, ctx: _Ctx, event_id: str, event_type: str, payload: bytes, rule_id: str | None,
               *, stages: int = 2, cred: str | None = None, ask_approved: bool = True) -> str:
        """Rule match (if a rule matched) and the decision chain for one event. The rule and
        the first decision archive the same payload bytes, as Capsem's do."""
        if self.p.tiny:
            stages = 1  # the small mix keeps one decision per event: bodies, not rows
        action = _RULES[rule_id][0] if rule_id else "allow"
        effective = {"allow": "allow", "block": "block", "ask": "ask", "rewrite": "allow"}.get(action, "allow")
        ms = self.ms()
        if rule_id is not None:
            self.insert("security_rule_events", {
                "timestamp_unix_ms": ms, "event_id": event_id, "event_type": event_type, "rule_id": rule_id,
                "rule_action": action, "detection_level": _RULES[rule_id][1], "rule_json": _RULE_JSON[rule_id],
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.body("payload", payload, "security.rule", "application/json")])
        chain: list[tuple[str, str, str | None, str | None, str, str]] = []
        if stages >= 3:
            chain.append(("preprocess", "plugin:credential-broker", None, "credential-broker", "allow",
                          "credentials resolved for the request"))
        chain.append(("rule", "policy", rule_id, None, effective,
                      f"matched {rule_id}" if rule_id else "no rule matched; default allow"))
        if stages >= 2:
            chain.append(("postprocess", "plugin:secret-scanner", None, "secret-scanner", effective,
                          "no secrets found in the payload"))
        previous = "allow"
        for i, (stage, actor, rid, plugin, requested, reason) in enumerate(chain):
            final = requested if stage != "postprocess" else effective
            self.insert("security_decision_events", {
                "timestamp_unix_ms": ms + i, "event_id": event_id, "event_type": event_type, "stage": stage,
                "actor": actor, "rule_id": rid, "plugin_id": plugin, "previous_decision": previous,
                "requested_decision": requested, "effective_decision": final, "reason": reason,
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.body("payload", payload, "security.decision", "application/json")] if i == 0 else ())
            previous = final
        if effective != "ask":
            return effective
        ask_id = self.eid()
        base = {"ask_id": ask_id, "event_id": event_id, "event_type": event_type, "rule_id": rule_id,
                "rule_name": rule_id.split(".", 1)[-1].replace("-", " ") if rule_id else "ask",
                "rule_json": _RULE_JSON[rule_id] if rule_id else "{}", "trace_id": ctx.trace_id,
                "turn_id": ctx.turn_id}
        self.insert("security_ask_events", {**base, "timestamp_unix_ms": ms + 5, "status": "pending",
                                            "resolver": None, "reason": None},
                    [self.body("payload", payload, "security.ask", "application/json")])
        self.tick(2.0, 40.0)
        status = "approved" if ask_approved else "denied"
        self.insert("security_ask_events", {**base, "timestamp_unix_ms": self.ms(), "status": status,
                                            "resolver": "user", "reason": f"{status} in the session tray"})
        resolved = "allow" if ask_approved else "block"
        self.insert("security_decision_events", {
            "timestamp_unix_ms": self.ms(), "event_id": event_id, "event_type": event_type,
            "stage": "ask_resolution", "actor": "user", "rule_id": rule_id, "plugin_id": None,
            "previous_decision": "ask", "requested_decision": resolved, "effective_decision": resolved,
            "reason": f"ask {ask_id} {status}", "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "credential_ref": cred})
        return resolved

    # --- network ----------------------------------------------------------------------------

    def transport(self, kind: str, connection_id: str | None, fields: Mapping[str, object]) -> None:
        self.insert("transport_events", {
            "event_id": self.eid(), "timestamp_unix_ms": self.ms(), "event_type": kind,
            "network_id": self.network_id, "connection_id": connection_id,
            "event_json": _jdump({"kind": kind, "network_id": self.network_id, "connection_id": connection_id,
                                  **fields}),
        })

    def resolve(self, ctx: _Ctx, domain: str, process: str) -> None:
        """A DNS lookup (and a new connection) unless the name was resolved recently."""
        last = self.dns_seen.get(domain)
        if last is not None and self.now - last < 300.0:
            return
        self.dns_seen[domain] = self.now
        denied = domain in _DENIED_DOMAINS[:3]
        h = _b3hex(domain.encode())
        ip = f"{104 + int(h[0:2], 16) % 80}.{int(h[2:4], 16)}.{int(h[4:6], 16)}.{1 + int(h[6:8], 16) % 250}"
        eid = self.eid()
        rule = "dns.block.telemetry" if denied else "dns.allow.default"
        took = self.r.randint(1, 40)
        self.insert("dns_events", {
            "event_id": eid, "timestamp": self.ts(), "qname": domain, "qtype": 1, "qclass": 1,
            "rcode": 5 if denied else 0, "answer_ip": None if denied else ip,
            "decision": "denied" if denied else "allowed", "matched_rule": rule, "source_proto": "udp",
            "process_name": process, "upstream_resolver_ms": 0 if denied else took,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "policy_mode": "enforce",
            "policy_action": "block" if denied else "allow", "policy_rule": rule,
            "policy_reason": "telemetry endpoint" if denied else "default resolver policy",
            "credential_ref": None,
        })
        pl = self.payload(ctx, eid, "dns.query", {"qname": domain, "qtype": "A", "process": process})
        self.secure(ctx, eid, "dns.query", pl, rule if denied else None, stages=1)
        self.now += took / 1000.0
        if not denied:
            conn = "conn-" + self.hexid(10)
            self.transport("network.connect", conn, {"domain": domain, "ip": ip, "port": 443, "proto": "tcp"})
            self.tick(0.005, 0.08)
            self.transport("network.connect_result", conn, {"ok": True, "tls": "TLSv1.3"})
            self.open_connections.append((conn, domain))

    def close_connections(self) -> None:
        for conn, domain in self.open_connections:
            self.transport("network.close", conn, {"domain": domain, "reason": "idle"})
        self.open_connections.clear()

    def net(self, ctx: _Ctx, process: str, pid: int, domain: str, method: str, path: str,
            query: str | None, status: int, req: bytes | None, resp: bytes | None, req_ct: str | None,
            resp_ct: str | None, duration_ms: int, *, rule: str, decision: str = "allowed",
            cred: str | None = None, headers: Mapping[str, str] | None = None, stages: int = 2,
            ask_approved: bool = True) -> str:
        self.resolve(ctx, domain, process)
        eid = self.eid()
        req_h = {"host": domain, "user-agent": process, "accept": "*/*"}
        if req_ct:
            req_h["content-type"] = req_ct
        if headers:
            req_h.update(headers)
        resp_h = {"content-type": resp_ct or "text/plain", "date": time.strftime(
            "%a, %d %b %Y %H:%M:%S GMT", time.gmtime(self.now))}
        denied = decision != "allowed"
        self.insert("net_events", {
            "event_id": eid, "timestamp": self.ts(), "domain": domain, "port": 443, "decision": decision,
            "process_name": process, "pid": pid, "method": method, "path": path, "query": query,
            "status_code": status, "bytes_sent": len(req or b""), "bytes_received": len(resp or b""),
            "duration_ms": duration_ms, "matched_rule": rule, "request_headers": _jdump(req_h),
            "response_headers": _jdump(resp_h), "headers_truncated": 0,
            "request_body_preview": _cap_bytes_text(req) if req and _textual(req_ct) else None,
            "response_body_preview": _cap_bytes_text(resp) if resp and _textual(resp_ct) else None,
            "conn_type": "https",
            "policy_mode": "enforce", "policy_action": "block" if denied else "allow", "policy_rule": rule,
            "policy_reason": "domain is not on the allowlist" if denied else "domain on the allowlist",
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
        }, [self.body("request", req, "http.request", req_ct), self.body("response", resp, "http.request", resp_ct)])
        fields: dict[str, object] = {"process": process, "method": method, "domain": domain, "path": path}
        if not self.p.tiny:
            fields.update({"pid": pid, "port": 443, "query": query, "headers": req_h,
                           "body_preview": _cap_bytes_text(req, 1024) if req and _textual(req_ct) else None})
        self.secure(ctx, eid, "http.request", self.payload(ctx, eid, "http.request", fields), rule,
                    stages=stages, cred=cred, ask_approved=ask_approved)
        return eid

    # --- agents and model exchanges -------------------------------------------------------

    def agent_spec(self, prov: _Provider) -> tuple[str, list[tuple[str, str, str]]]:
        """The system prompt and tool definitions an agent sends with every request."""
        spec = self.agent_specs.get(prov.name)
        if spec is None:
            r = random.Random(f"{prov.name} agent spec")  # the same agent build in every sample
            system = ("You are an interactive coding agent running inside a Capsem sandbox. "
                      + self.pools.prose(r, self.p.system_bytes))
            tools = []
            for kind in self.kind_names:
                params = _TOOL_PARAMS[kind]
                schema = _jdump({"type": "object", "properties": {
                    k: {"type": t, "description": self.pools.sentences_k(r, 1)} for k, t in params.items()},
                    "required": list(params)[:1], "additionalProperties": False})
                tools.append((_TOOL_NAMES[prov.name][kind], self.pools.prose(r, self.p.tool_desc_bytes), schema))
            spec = (system, tools)
            self.agent_specs[prov.name] = spec
        return spec

    def call_id(self, prov: _Provider, name: str) -> str:
        if prov.name == "anthropic":
            return "toolu_01" + self.b58(22)
        if prov.name == "openai":
            return "call_" + self.alnum(24)
        return f"{name}-{self.ms()}-{self.hexid(13)}"

    def choose_kinds(self, k: int) -> list[str]:
        kinds = self.r.choices(self.kind_names, cum_weights=self.kind_cum, k=k)
        want = [x for x in ("mcp_search", "builtin_exec", "shell") if x in self.kind_names]
        seen = self.seen_kinds
        for i, forced in enumerate(x for x in want if x not in seen and x not in kinds):
            if i < len(kinds):
                kinds[i] = forced
        seen.update(kinds)
        return kinds

    def make_args(self, kind: str) -> tuple[dict[str, Any], str]:
        r, P, p = self.r, self.pools, self.p
        path = f"{_FS_TOP}/{r.choice(P.paths)}"
        detail = ""
        if kind in ("shell", "builtin_exec"):
            detail = r.choice(list(_SHELL_CMDS))
            cmd = r.choice(_SHELL_CMDS[detail])
            if detail == "git" and cmd.startswith("git push") and r.random() < 0.7:
                cmd = "git log --oneline -n 5"
            args: dict[str, Any] = {"command": cmd}
            if kind == "shell":
                args["description"] = P.sentences_k(r, 1)[:60]
        elif kind == "read":
            args = {"file_path": path}
        elif kind == "edit":
            if p.tiny:
                args = {"file_path": path, "old_string": P.code[r.randrange(200)],
                        "new_string": P.code[r.randrange(200)]}
            else:
                args = {"file_path": path, "old_string": P.code_text(r, r.randint(60, 300)),
                        "new_string": P.code_text(r, r.randint(60, 400))}
        elif kind == "write":
            size = r.randint(100, 200) if p.tiny else self.logu(*p.file_bytes)
            args = {"file_path": path, "content": P.code_text(r, size)}
        elif kind == "grep":
            args = {"pattern": f"{r.choice(_IDENT_VERBS)}_{r.choice(_IDENT_NOUNS)}", "path": "src",
                    "output_mode": "content"}
        elif kind == "glob":
            args = {"pattern": r.choice(["**/*.py", "tests/**/*.py", "cext/*.c", "docs/*.md"])}
        elif kind == "web":
            args = {"url": f"https://docs.python.org/3/library/{r.choice(_MODULES)}.html",
                    "prompt": P.sentences_k(r, 1)}
        elif kind == "todo":
            n = 1 if p.tiny else r.randint(2, 6)
            args = {"todos": [{"content": P.sentences_k(r, 1)[:70], "status": r.choice(
                ["pending", "in_progress", "completed"]), "id": str(i + 1)} for i in range(n)]}
        elif kind == "mcp_search":
            args = {"owner": "capsem-dev", "repo": "capsem-core",
                    "query": f"{r.choice(_IDENT_VERBS)} {r.choice(_IDENT_NOUNS)} is:open"}
        elif kind == "mcp_file":
            args = {"owner": "capsem-dev", "repo": "capsem-core", "path": r.choice(P.paths)}
        else:  # builtin_snapshot
            self.snapshot_n += 1
            args = {"name": f"checkpoint-{self.snapshot_n}"}
        return args, detail

    def make_reply(self, prov: _Provider, final: bool) -> _Reply:
        r, P, p = self.r, self.pools, self.p
        k = 0 if final else r.randint(*p.tools)
        thinking = None
        if prov.name != "openai" and p.thinking_sentences[1] > 0 and r.random() < 0.7:
            thinking = P.sentences_k(r, r.randint(max(1, p.thinking_sentences[0]), p.thinking_sentences[1]))
        text: str | None = P.sentences_k(r, r.randint(*p.reply_sentences))
        if k and r.random() < 0.35:
            text = None
        uses = []
        for i, kind in enumerate(self.choose_kinds(k)):
            name = _TOOL_NAMES[prov.name][kind]
            args, detail = self.make_args(kind)
            uses.append(_ToolUse(self.call_id(prov, name), kind, name, args, _jdump(args), i, detail))
        if prov.name == "anthropic":
            stop = "tool_use" if uses else "end_turn"
        elif prov.name == "openai":
            stop = "tool_calls" if uses else "stop"
        else:
            stop = "STOP"
        return _Reply(thinking, text, uses, stop)

    def model_item(self, ctx: _Ctx, prov: _Provider, kind: str, idx: int, call_id: str,
                   tool_name: str | None, arguments: str | None, content: str | None) -> None:
        material = _jdump({"kind": kind, "call_id": call_id, "tool_name": tool_name, "arguments": arguments,
                           "content": content})
        h = "blake3:" + _b3hex(material.encode())
        key = (kind, h, call_id)
        if key in self.items_seen:  # UNIQUE(trace_id, kind, content_hash, call_id): replays are not new
            return
        self.items_seen.add(key)
        cap = PREVIEW_CAP if kind == "tool_response" else 64 * KIB
        self.insert("model_items", {
            "event_id": self.eid(), "model_call_id": ctx.model_call_id, "timestamp": self.ts(),
            "provider": prov.name, "model": prov.model, "path": prov.path, "trace_id": ctx.trace_id,
            "turn_id": ctx.turn_id, "kind": kind, "item_index": idx, "call_id": call_id,
            "tool_name": tool_name, "arguments": _cap(arguments, 64 * KIB), "content": _cap(content, cap),
            "content_hash": h, "credential_ref": self.creds[prov.name],
        })

    def model_call(self, conv: _Conversation, ctx: _Ctx, pending: Sequence[_ToolResult], final: bool,
                   state: dict[str, int]) -> _Reply:
        """One provider exchange: the request with the whole history, the streamed reply, and
        every row Capsem writes about it."""
        r, prov = self.r, conv.prov
        cred = self.creds[prov.name]
        request = conv.request()
        reply = self.make_reply(prov, final)
        signature = self.b58(88) if reply.thinking else ""
        in_tok = max(1, int(len(request) / 3.6))
        cache_read = min(state.get("prev_input", 0), in_tok - 1) if prov.name != "google" or in_tok > 4096 else 0
        think_tok = int(len(reply.thinking) / 3.8) if reply.thinking else 0
        out_tok = 1 + think_tok + int((len(reply.text or "") + sum(len(u.args_json) for u in reply.uses)) / 3.8)
        usage = {"input": in_tok, "cache_read": max(cache_read, 0), "thinking": think_tok, "output": out_tok}
        state["prev_input"] = in_tok
        if prov.name == "anthropic":
            message_id = "msg_01" + self.b58(22)
            response = _sse_anthropic(message_id, prov.model, usage, reply, signature, self.p.delta_width)
        elif prov.name == "openai":
            message_id = "chatcmpl-" + self.alnum(29)
            response = _sse_openai(message_id, int(self.now), prov.model, "fp_" + self.hexid(10), usage, reply,
                                   self.p.delta_width)
        else:
            message_id = self.alnum(22)
            response = _sse_google(message_id, prov.model, usage, reply, max(self.p.delta_width * 4, 120))
        duration_ms = int(r.uniform(350, 2500) + out_tok / r.uniform(40, 110) * 1000)
        started = self.now
        # The credential broker swaps the guest's placeholder for the real key on the way out.
        self.insert("substitution_events", {
            "event_id": self.eid(), "timestamp": self.ts(), "material_class": "api_key",
            "source": "host_keychain", "event_type": "http.request", "algorithm": "blake3",
            "substitution_ref": cred, "outcome": "injected", "provider": prov.name, "confidence": 1.0,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "context_json": _jdump({"header": prov.key_header, "domain": prov.domain}),
        })
        self.now += duration_ms / 1000.0
        self.net(ctx, prov.process, ctx.pid, prov.domain, "POST", prov.path, prov.query, 200, request, response,
                 "application/json", "text/event-stream; charset=utf-8", duration_ms,
                 rule="net.allow.ai-providers", cred=cred, stages=3,
                 headers={prov.key_header: cred, "user-agent": prov.user_agent})
        mc_id = self.next_model_call_id
        self.next_model_call_id += 1
        ctx.model_call_id = mc_id
        cost = round((in_tok - usage["cache_read"]) * prov.price_in + usage["cache_read"] * prov.price_cache
                     + out_tok * prov.price_out, 8)
        details = {k: v for k, v in (("cache_read", usage["cache_read"]), ("thinking", think_tok)) if v}
        preview = conv.msgs[-1].decode("utf-8", "replace")[:PREVIEW_CAP] if conv.msgs else None
        mc_eid = self.eid()
        self.insert("model_calls", {
            "id": mc_id, "event_id": mc_eid, "timestamp": ledger_time(started), "provider": prov.name,
            "protocol": prov.name, "model": prov.model, "process_name": prov.process, "pid": ctx.pid,
            "method": "POST", "path": prov.path, "stream": 1, "system_prompt_preview": conv.system[:PREVIEW_CAP],
            "messages_count": conv.messages_count, "tools_count": conv.n_tools, "request_bytes": len(request),
            "request_body_preview": preview, "message_id": message_id, "status_code": 200,
            "text_content": _cap(reply.text, 64 * KIB), "thinking_content": _cap(reply.thinking, 64 * KIB),
            "stop_reason": reply.stop_reason, "input_tokens": in_tok, "output_tokens": out_tok,
            "duration_ms": duration_ms, "response_bytes": len(response), "estimated_cost_usd": cost,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "usage_details": _jdump(details) if details else None, "credential_ref": cred,
        }, [self.body("request", request, "model.call", "application/json"),
            self.body("response", response, "model.call")])
        for res in pending:
            self.insert("tool_responses", {
                "event_id": self.eid(), "model_call_id": mc_id, "call_id": res.call_id,
                "content_preview": res.content[:PREVIEW_CAP], "is_error": int(res.is_error),
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.body("response", res.content.encode(), "model.call")])
        idx = 0
        if not pending and preview is not None:
            idx += 1
            self.model_item(ctx, prov, "request", idx, "", None, None, preview)
        if reply.thinking:
            idx += 1
            self.model_item(ctx, prov, "reasoning", idx, "", None, None, reply.thinking)
        if reply.text:
            idx += 1
            self.model_item(ctx, prov, "response", idx, "", None, None, reply.text)
        for u in reply.uses:
            idx += 1
            self.model_item(ctx, prov, "tool_call", idx, u.call_id, u.name, u.args_json, u.args_json)
        for res in pending:
            idx += 1
            self.model_item(ctx, prov, "tool_response", idx, res.call_id, None, None, res.content)
        for u in reply.uses:
            if u.kind in _MCP_TOOL:
                continue  # recorded, enriched, when the MCP call is made
            self.insert("tool_calls", {
                "event_id": self.eid(), "timestamp": ledger_time(started), "model_call_id": mc_id,
                "provider": prov.name, "status": "observed", "call_index": u.index, "call_id": u.call_id,
                "tool_name": u.name, "arguments": _cap(u.args_json, 64 * KIB), "response_preview": None,
                "origin": "native", "transport": "sse", "server_name": "model", "method": None,
                "request_id": None, "decision": "allowed", "duration_ms": duration_ms, "error_message": None,
                "process_name": prov.process, "bytes_sent": 0, "bytes_received": 0, "policy_mode": "enforce",
                "policy_action": "allow", "policy_rule": None, "policy_reason": None,
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            })
        fields: dict[str, object] = {"provider": prov.name, "model": prov.model, "path": prov.path}
        if not self.p.tiny:
            fields.update({"messages_count": conv.messages_count, "tools_count": conv.n_tools,
                           "request_bytes": len(request), "stop_reason": reply.stop_reason,
                           "tool_calls": [u.name for u in reply.uses], "model_call_id": mc_id})
        self.secure(ctx, mc_eid, "model.call", self.payload(ctx, mc_eid, "model.call", fields),
                    "model.allow.agents", stages=1, cred=cred)
        conv.add_reply(reply, signature)
        return reply

    # --- processes, files, execs ------------------------------------------------------------

    def audit(self, ctx: _Ctx, exe: str, argv: Sequence[str], ppid: int, parent_exe: str | None,
              exec_event_id: int | None = None, exit_code: int | None = 0) -> tuple[int, str]:
        pid = self.new_pid()
        eid = self.eid()
        ms = self.ms()
        self.insert("audit_events", {
            "event_id": eid, "timestamp": self.ts(), "pid": pid, "ppid": ppid, "uid": 1000, "exe": exe,
            "comm": exe.rsplit("/", 1)[-1][:15], "argv": _jdump(list(argv)), "cwd": _FS_TOP,
            "exit_code": exit_code, "session_id": self.audit_session, "tty": None,
            "audit_id": f"{ms // 1000}.{ms % 1000:03d}:{self.c.rows.get('audit_events', 0) + 1}",
            "exec_event_id": exec_event_id, "parent_exe": parent_exe, "trace_id": ctx.trace_id,
            "turn_id": ctx.turn_id, "credential_ref": None,
        })
        return pid, eid

    def fs(self, ctx: _Ctx, action: str, path: str, size: int | None, kind: str = "file") -> None:
        directory, name = path.rsplit("/", 1)
        self.insert("fs_events", {
            "event_id": self.eid(), "timestamp": self.ts(), "action": action, "path": path,
            "directory": directory or "/", "name": name, "size": size, "kind": kind,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": None,
        })

    def fs_burst(self, ctx: _Ctx, directory: str, n: int, action: str = "created") -> None:
        """A burst of changes seen by the file monitor; a scan emits at most one window of
        them and marks the rest with an overflow row (size = how many were deferred)."""
        window = self.p.fs_window
        r = self.r
        emitted = 0
        while emitted < n:
            batch = min(window, n - emitted)
            for i in range(emitted, emitted + batch):
                ext = ".py" if i % 3 else ".pyc"
                self.fs(ctx, action, f"{directory}/{_IDENT_VERBS[i % len(_IDENT_VERBS)]}_"
                        f"{_IDENT_NOUNS[(i // 7) % len(_IDENT_NOUNS)]}_{i}{ext}", r.randint(90, 40_000))
                self.now += 0.0004
            emitted += batch
            if emitted < n:
                self.insert("fs_events", {
                    "event_id": self.eid(), "timestamp": self.ts(), "action": "overflow", "path": "",
                    "directory": None, "name": None, "size": n - emitted, "kind": "other",
                    "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": None,
                })
                self.tick(0.25, 1.0)  # the deferred changes arrive with the next scan

    def output(self, kind: str, nbytes: int) -> str:
        """Command output of about ``nbytes`` bytes (exactly, when it has to be cut)."""
        text = self.pools.shell_lines(self.r, kind, nbytes // 40 + 1)
        while len(text) < nbytes:
            text += "\n" + self.pools.shell_lines(self.r, kind, nbytes // 40 + 1)
        return text[:nbytes]

    def exec_cmd(self, ctx: _Ctx, command: str, source: str, detail: str, process: str) -> tuple[str, int, int]:
        """An exec-API / built-in exec command, its output (cut to 1 KiB as the guest cuts it)
        archived beside the row. Returns (stored stdout, exit code, exec_events row id)."""
        r = self.r
        self.exec_id += 1
        eid = self.eid()
        started = self.now
        if self.p.tiny:
            out = self.output(detail, r.randint(100, 300))
            out_total = len(out.encode())
            err = self.output("build", r.randint(100, 300)) if r.random() < 0.3 else ""
            err_total = len(err.encode())
        else:
            out_total = self.logu(40, 60_000)
            out = self.output(detail, min(out_total, EXEC_OUTPUT_CAP))
            err_total = self.logu(30, 6000) if r.random() < 0.25 else 0
            err = self.output("build", min(err_total, EXEC_OUTPUT_CAP)) if err_total else ""
        exit_code = 1 if (detail == "pytest" and "FAILED" in out) else (2 if r.random() < 0.03 else 0)
        duration = int(self.logu(15, 30_000) if not self.p.tiny else r.randint(5, 400))
        self.now += duration / 1000.0
        pid = self.new_pid()
        self.insert("exec_events", {
            "event_id": eid, "timestamp": ledger_time(started), "exec_id": self.exec_id, "command": command,
            "exit_code": exit_code, "duration_ms": duration, "stdout_preview": out or None,
            "stderr_preview": err or None, "stdout_bytes": out_total, "stderr_bytes": err_total,
            "source": source, "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "process_name": process,
            "pid": pid, "credential_ref": None,
        }, [self.body("stdout", out.encode(), "process.exec_complete", "text/plain", out_total),
            self.body("stderr", err.encode(), "process.exec_complete", "text/plain", err_total)])
        row_id = self.c.rows["exec_events"]
        fields: dict[str, object] = {"command": command[:120], "source": source}
        if not self.p.tiny:
            fields.update({"cwd": _FS_TOP, "exit_code": exit_code, "pid": pid, "exec_id": self.exec_id})
        self.secure(ctx, eid, "process.exec", self.payload(ctx, eid, "process.exec", fields),
                    "exec.allow.workspace", stages=1)
        argv = command.split()
        self.audit(ctx, _EXE.get(detail, "/usr/bin/bash"), argv, ctx.pid or 1, "/usr/libexec/capsem-agent",
                   exec_event_id=row_id, exit_code=exit_code)
        return out, exit_code, row_id

    def download(self, ctx: _Ctx, process: str, pid: int, domain: str, path: str, nbytes: int) -> None:
        """A package or pack download: compressed archive bytes, which do not compress again."""
        body = self.r.randbytes(nbytes)
        took = int(nbytes / self.r.uniform(5e6, 40e6) * 1000) + self.r.randint(20, 200)
        self.now += took / 1000.0
        self.net(ctx, process, pid, domain, "GET", path, None, 200, None, body, None,
                 "application/octet-stream", took, rule="net.allow.dev-registries")

    def telemetry(self, ctx: _Ctx, process: str, pid: int) -> None:
        """An agent's telemetry beacon, refused by policy."""
        domain = self.r.choice(_DENIED_DOMAINS[:3])
        req = _jdump({"event": "tengu_api_success", "session": self.user_id[-16:], "ts": self.ms(),
                      "props": {"model": ctx.prov.model if ctx.prov else None,
                                "durationMs": self.r.randint(300, 9000)}}).encode()
        self.net(ctx, process, pid, domain, "POST", "/api/1/envelope/", None, 403, req,
                 b'{"error":"blocked by capsem network policy"}', "application/json", "application/json",
                 self.r.randint(1, 5), rule="net.block.telemetry", decision="denied", stages=1)

    # --- tools ------------------------------------------------------------------------------

    def sized(self, budget: int) -> int:
        return min(self.logu(*self.p.result_bytes), budget)

    def numbered(self, text: str, first: int = 1) -> str:
        return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(text.split("\n"), first))

    def run_tool(self, use: _ToolUse, ctx: _Ctx, budget: int) -> _ToolResult:
        r, P, p = self.r, self.pools, self.p
        kind = use.kind
        if kind in _MCP_TOOL:
            return self.run_mcp(use, ctx, budget)
        prov = ctx.prov
        assert prov is not None
        err = False
        if kind == "shell":
            return self.run_shell(use, ctx, budget)
        if kind == "read":
            self.tick(0.005, 0.04)
            text = self.tiny(P.code_text(r, 200)) if p.tiny else self.numbered(
                P.code_text(r, min(self.logu(*p.file_bytes), budget)))
        elif kind == "edit":
            self.tick(0.01, 0.08)
            self.fs(ctx, "modified", use.args["file_path"], r.randint(400, 60_000))
            head = f"The file {use.args['file_path']} has been updated. "
            text = self.tiny(head + use.args["new_string"]) if p.tiny else (
                head + "Here's the result of running `cat -n` on a snippet of the edited file:\n"
                + self.numbered(P.code_text(r, min(self.sized(budget), 6000)), r.randint(1, 400)))
        elif kind == "write":
            self.tick(0.01, 0.1)
            self.fs(ctx, "created", use.args["file_path"], len(use.args["content"].encode()))
            text = f"File created successfully at: {use.args['file_path']}"
            if p.tiny:
                text = self.tiny(text)
        elif kind == "grep":
            self.tick(0.02, 0.6)
            text = self.tiny(self.output("grep", 200)) if p.tiny else self.output("grep", self.sized(budget))
        elif kind == "glob":
            self.tick(0.01, 0.2)
            k = 4 if p.tiny else max(1, self.sized(budget) // 40)
            text = "\n".join(f"{_FS_TOP}/{x}" for x in r.choices(P.paths, k=k))
            if p.tiny:
                text = self.tiny(text)
        elif kind == "web":
            text, err = self.run_web(use, ctx, budget)
        elif kind == "todo":
            self.tick(0.001, 0.01)
            text = ("Todos have been modified successfully. Ensure that you continue to use the todo list "
                    "to track your progress. Please proceed with the current tasks if applicable")
            if p.tiny:
                text = self.tiny(text)
        else:
            raise AssertionError(f"no runner for tool kind {kind}")
        return _ToolResult(use.call_id, use.name, text, err)

    def run_shell(self, use: _ToolUse, ctx: _Ctx, budget: int) -> _ToolResult:
        r, p = self.r, self.p
        prov = ctx.prov
        assert prov is not None
        cmd: str = use.args["command"]
        detail = use.detail or "ls"
        bash_pid, _ = self.audit(ctx, "/usr/bin/bash", ["bash", "-c", cmd], ctx.pid, f"/usr/local/bin/{prov.process}")
        child_pid, child_eid = self.audit(ctx, _EXE[detail], cmd.split(), bash_pid, "/usr/bin/bash")
        fields: dict[str, object] = {"exe": _EXE[detail], "argv": cmd.split()[:8]}
        if not p.tiny:
            fields.update({"pid": child_pid, "ppid": bash_pid, "cwd": _FS_TOP, "uid": 1000})
        payload = self.payload(ctx, child_eid, "process.audit", fields)
        rule = ("process.ask.git-push" if cmd.startswith("git push")
                else "process.log.package-install" if detail == "pip" else None)
        verdict = self.secure(ctx, child_eid, "process.audit", payload, rule, stages=1,
                              ask_approved=r.random() < 0.7)
        if verdict == "block":
            return _ToolResult(use.call_id, use.name, "Error: the command was blocked by the Capsem policy "
                               "rule process.ask.git-push (denied by the user).", True)
        size = 200 if p.tiny else self.sized(budget)
        if detail == "pip":
            pkg = cmd.split()[-1].strip(".") or "capsem-core"
            listing = "\n".join(f'<a href="https://files.pythonhosted.org/packages/{self.hexid(2)}/{self.hexid(2)}/'
                                f'{pkg}-{i}.{r.randint(0, 9)}.0-py3-none-any.whl">{pkg}-{i}.0</a><br/>'
                                for i in range(2 if p.tiny else r.randint(5, 60)))
            self.tick(0.05, 0.6)
            self.net(ctx, "pip", child_pid, "pypi.org", "GET", f"/simple/{pkg}/", None, 200, None,
                     listing.encode(), None, "text/html", r.randint(40, 300), rule="net.allow.dev-registries")
            if p.download_p and r.random() < p.download_p * 4:
                self.download(ctx, "pip", child_pid, "files.pythonhosted.org",
                              f"/packages/{self.hexid(2)}/{self.hexid(2)}/{self.hexid(60)}/{pkg}-1.0-py3-none-any.whl",
                              self.logu(*p.download_bytes))
            self.fs_burst(ctx, "/usr/local/lib/python3.11/site-packages/" + pkg.replace("-", "_"),
                          r.randint(4, 20) if p.tiny else r.randint(10, 3 * p.fs_window))
        elif detail == "build":
            self.fs_burst(ctx, f"{_FS_TOP}/build", r.randint(2, 12) if p.tiny else self.logu(10, 3 * p.fs_window))
        elif detail == "pytest":
            self.fs(ctx, "modified", f"{_FS_TOP}/.pytest_cache/v/cache/lastfailed", r.randint(2, 900))
        elif detail == "git" and cmd.startswith("git push"):
            self.net(ctx, "git", child_pid, "github.com", "POST", "/capsem-dev/capsem-core.git/git-receive-pack",
                     None, 200, self.r.randbytes(r.randint(150, 300) if p.tiny else min(self.logu(2000, 200_000), budget)),
                     b"000eunpack ok\n0019ok refs/heads/main\n0000", "application/x-git-receive-pack-request",
                     "application/x-git-receive-pack-result", r.randint(200, 3000),
                     rule="net.allow.dev-registries")
        text = self.output(detail, size)
        if p.tiny:
            text = self.tiny(text)
        exit_code = 1 if (detail == "pytest" and "FAILED" in text) else 0
        if p.tiny:
            self.tick(0.05, 2.0)
        else:
            self.tick(0.2, 25.0)
        if exit_code:
            text += f"\nExit code {exit_code}" if not p.tiny else ""
        return _ToolResult(use.call_id, use.name, text, bool(exit_code))

    def run_web(self, use: _ToolUse, ctx: _Ctx, budget: int) -> tuple[str, bool]:
        r, P, p = self.r, self.pools, self.p
        prov = ctx.prov
        assert prov is not None
        x = r.random()
        if x < 0.05:
            domain, rule, approved = "pastebin.com", "net.ask.paste-sites", False
        else:
            domain, rule, approved = ("sqlite.org" if x < 0.2 else "docs.python.org"), "net.allow.dev-registries", True
        path = "/" + use.args["url"].split("/", 3)[-1] if domain == "docs.python.org" else "/lang_transaction.html"
        if domain == "pastebin.com":
            path = "/raw/" + self.alnum(8)
        if not approved:
            self.net(ctx, prov.process, ctx.pid, domain, "GET", path, None, 403, None,
                     b'{"error":"blocked by capsem network policy"}', None, "application/json", r.randint(1, 9),
                     rule=rule, decision="denied", ask_approved=False)
            return f"Request failed with status code 403: {domain} was blocked by the Capsem network policy.", True
        page_size = min(self.logu(*p.file_bytes), max(budget * 4, 8192))
        paras = P.prose(r, page_size).split(". ")
        html = P.html_head + "".join(f"<p>{s}.</p>\n" for s in paras) + P.html_tail
        took = r.randint(80, 1500)
        self.now += took / 1000.0
        self.net(ctx, prov.process, ctx.pid, domain, "GET", path, None, 200, None, html.encode(), None,
                 "text/html; charset=utf-8", took, rule=rule)
        return "# " + P.sentences_k(r, 1) + "\n\n" + P.prose(r, self.sized(budget)), False

    def run_mcp(self, use: _ToolUse, ctx: _Ctx, budget: int) -> _ToolResult:
        """An MCP tools/call: one logical tool call (the model's call id), enriched with the MCP
        server, method and JSON-RPC id, its request and response archived with the row."""
        r, P, p = self.r, self.pools, self.p
        prov = ctx.prov
        assert prov is not None
        server, tool = _MCP_TOOL[use.kind]
        self.jsonrpc_id += 1
        rid = self.jsonrpc_id
        req = _jdump({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                      "params": {"name": tool, "arguments": use.args}}).encode()
        started = self.now
        is_error = False
        if use.kind == "builtin_exec":
            out, code, _ = self.exec_cmd(ctx, use.args["command"], "mcp", use.detail or "ls", "capsem-mcp")
            text = out if p.tiny else f"{out}\n[exit code {code}]"
            if p.tiny:
                text = _fit(text, 100, 170, "ok")
            is_error = code != 0
        elif use.kind == "builtin_snapshot":
            self.tick(0.2, 3.0)
            text = _jdump({"snapshot": use.args["name"], "files": r.randint(40, 4000),
                           "bytes": r.randint(10_000, 90_000_000), "created_at": self.ts()})
        elif use.kind == "mcp_search":
            self.tick(0.15, 1.5)
            if p.tiny:
                text = _fit(_jdump({"total_count": r.randint(0, 40), "items": [
                    {"number": r.randint(1, 900), "title": P.sentences[r.randrange(500)][:60], "state": "open"}]}),
                    100, 170, "")
            else:
                n = max(1, self.sized(budget) // 700)
                text = _jdump({"total_count": n + r.randint(0, 50), "incomplete_results": False, "items": [
                    {"number": r.randint(1, 900), "title": P.sentences_k(r, 1)[:80], "state": "open",
                     "user": {"login": r.choice(["ana", "bo", "kai", "lee", "sam"])}, "labels": [
                         {"name": r.choice(["bug", "perf", "docs", "ledger"])}],
                     "created_at": ledger_time(self.now - r.randint(3600, 9_000_000)),
                     "body": P.prose(r, 500)} for _ in range(n)]}, )
        else:  # mcp_file
            self.tick(0.1, 1.0)
            text = _fit(P.code_text(r, 150), 100, 170, "") if p.tiny else P.code_text(r, self.sized(budget))
        resp = _jdump({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": text}], "isError": is_error}}).encode()
        duration = max(1, int((self.now - started) * 1000))
        if server == "github":
            self.net(ctx, prov.process, ctx.pid, _MCP_URL[0], "POST", _MCP_URL[1], None, 200, req,
                     b"event: message\ndata: " + resp + b"\n\n", "application/json", "text/event-stream",
                     duration, rule="net.allow.dev-registries", headers={"mcp-session-id": self.user_id[5:41]})
        teid = self.eid()
        origin = "mcp" if server == "github" else "builtin"
        rule = "mcp.allow.github-read" if server == "github" else "mcp.allow.capsem-builtin"
        self.insert("tool_calls", {
            "event_id": teid, "timestamp": ledger_time(started), "model_call_id": ctx.model_call_id,
            "provider": prov.name, "status": "error" if is_error else "responded", "call_index": use.index,
            "call_id": use.call_id, "tool_name": tool, "arguments": _cap_bytes_text(req),
            "response_preview": _cap_bytes_text(resp), "origin": origin,
            "transport": "http" if server == "github" else "vsock_frame", "server_name": server,
            "method": "tools/call", "request_id": str(rid), "decision": "allowed", "duration_ms": duration,
            "error_message": "command exited with a non-zero status" if is_error else None,
            "process_name": prov.process, "bytes_sent": len(req), "bytes_received": len(resp),
            "policy_mode": "enforce", "policy_action": "allow", "policy_rule": rule,
            "policy_reason": "tool allowed by the profile", "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "credential_ref": None,
        }, [self.body("request", req, "mcp.tool_call", "application/json"),
            self.body("response", resp, "mcp.tool_call", "application/json")])
        fields: dict[str, object] = {"server": server, "tool": tool, "request_id": rid}
        if not p.tiny:
            fields.update({"arguments": use.args, "call_id": use.call_id, "transport": "http"})
        self.secure(ctx, teid, "mcp.tool_call", self.payload(ctx, teid, "mcp.tool_call", fields), rule, stages=2)
        return _ToolResult(use.call_id, use.name, text, is_error)

    # --- the session ------------------------------------------------------------------------

    def mcp_handshake(self, ctx: _Ctx, process: str, pid: int) -> None:
        """initialize and tools/list against the GitHub MCP server: protocol facts, recorded as
        security events whose payload carries the exchange."""
        r, P, p = self.r, self.pools, self.p
        tools = [{"name": t, "description": P.sentences_k(r, 1 if p.tiny else 3),
                  "inputSchema": {"type": "object", "properties": {"owner": {"type": "string"},
                                                                   "repo": {"type": "string"}}}}
                 for t in ("search_issues", "get_file_contents") + (() if p.tiny else (
                     "list_pull_requests", "create_issue", "get_commit", "search_code"))]
        exchanges = [
            ("initialize", "mcp.event", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": process, "version": "1.0"}},
             {"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}},
              "serverInfo": {"name": "github-mcp-server", "version": "0.9.0"}}),
            ("tools/list", "mcp.tool_list", {}, {"tools": tools}),
        ]
        for method, event_type, params, result in exchanges:
            self.jsonrpc_id += 1
            req = _jdump({"jsonrpc": "2.0", "id": self.jsonrpc_id, "method": method, "params": params}).encode()
            resp = _jdump({"jsonrpc": "2.0", "id": self.jsonrpc_id, "result": result}).encode()
            took = r.randint(60, 400)
            self.now += took / 1000.0
            self.net(ctx, process, pid, _MCP_URL[0], "POST", _MCP_URL[1], None, 200, req,
                     b"event: message\ndata: " + resp + b"\n\n", "application/json", "text/event-stream", took,
                     rule="net.allow.dev-registries", stages=1)
            eid = self.eid()
            fields: dict[str, object] = {"server": "github", "method": method}
            if p.tiny:
                fields["tools"] = len(tools) if method == "tools/list" else None
            else:
                fields.update({"request": json.loads(req), "response": json.loads(resp)})
            self.secure(ctx, eid, event_type, self.payload(ctx, eid, event_type, fields), "mcp.log.protocol",
                        stages=1)

    def preamble(self) -> None:
        r, p = self.r, self.p
        self.transport("network.lifecycle", None, {"state": "created", "subnet": "10.77.0.0/24"})
        for key in ("api.githubcopilot.com", "sqlite.org"):
            old, new = "allow = []\n", f'allow = ["{key}"]\n'
            self.insert("profile_mutation_events", {
                "timestamp_unix_ms": self.ms(), "mutation_id": self.eid(), "profile_id": "default",
                "actor": "user", "category": "network", "filename": "capsem.toml",
                "affected_path": "~/.capsem/profiles/default/capsem.toml", "target_kind": "domain",
                "target_key": key, "operation": "allow", "rule_id": "net.allow.dev-registries",
                "old_hash": "blake3:" + _b3hex(old.encode()), "old_size": len(old),
                "new_hash": "blake3:" + _b3hex(new.encode()), "new_size": len(new), "status": "applied",
                "error": None, "trace_id": None,
            })
            self.tick(0.5, 4.0)
        ctx = _Ctx(self.hexid(32), None, None, None, self.new_pid())
        self.exec_cmd(ctx, f"git clone https://github.com/capsem-dev/capsem-core {_FS_TOP}", "api", "git",
                      "capsem-exec")
        pack = 300 if p.tiny else self.logu(40_000, 400_000) if p.download_p < 0.2 else self.logu(1 * MIB, 6 * MIB)
        self.net(ctx, "git", ctx.pid, "github.com", "POST", "/capsem-dev/capsem-core.git/git-upload-pack", None, 200,
                 b"0032want " + self.hexid(40).encode() + b"\n00000009done\n", r.randbytes(pack),
                 "application/x-git-upload-pack-request", "application/x-git-upload-pack-result",
                 r.randint(200, 4000), rule="net.allow.dev-registries")
        self.fs_burst(ctx, f"{_FS_TOP}/src", 2 * p.fs_window + r.randint(5, 50))
        self.mcp_handshake(ctx, "claude", ctx.pid)
        self.tick(2.0, 30.0)

    def api_execs(self) -> None:
        r = self.r
        ctx = _Ctx(self.hexid(32), None, None, None, self.new_pid())
        for _ in range(r.randint(1, 6 if self.p.tiny else 3)):
            detail = r.choice(("pytest", "git", "ls", "grep"))
            cmd = _SHELL_CMDS[detail][0]
            self.exec_cmd(ctx, cmd, "api", detail, "capsem-exec")
            self.tick(0.05, 3.0)
            if self.done():
                break

    def trace(self) -> None:
        r, P, p = self.r, self.pools, self.p
        name = self.provider_queue.pop(0) if self.provider_queue else r.choices(
            ("anthropic", "openai", "google"), weights=(0.5, 0.25, 0.25))[0]
        prov = _PROVIDERS[name]
        system, tools = self.agent_spec(prov)
        conv = _Conversation(prov, system, tools, self.user_id)
        ctx = _Ctx(self.hexid(32), None, prov, None, 0)
        self.items_seen = set()
        ctx.pid, _ = self.audit(ctx, f"/usr/local/bin/{prov.process}", [prov.process, "--continue"], 1,
                                "/usr/libexec/capsem-agent", exit_code=None)
        state: dict[str, int] = {}
        for _turn in range(r.randint(*p.turns)):
            ctx.turn_id = self.hexid(32)
            if conv.msg_bytes > p.max_history:
                conv.compact(P.prose(r, min(p.max_history // 20, 40_000)))
                state.clear()
            conv.add_user(P.sentences_k(r, 1 if p.tiny else r.randint(1, 4)))
            pending: list[_ToolResult] = []
            steps = r.randint(*p.steps)
            for step in range(steps):
                final = step == steps - 1 or self.done() or conv.msg_bytes > p.max_history
                reply = self.model_call(conv, ctx, pending, final, state)
                pending = []
                if not p.tiny and r.random() < 0.08:
                    self.telemetry(ctx, prov.process, ctx.pid)
                if not reply.uses:
                    break
                room = MAX_GENERATED_BODY - len(conv.prefix) - conv.msg_bytes - 512 * KIB
                budget = max(4096, room // len(reply.uses))
                pending = [self.run_tool(u, ctx, budget) for u in reply.uses]
                conv.add_results(pending)
            if self.done():
                break
            self.tick(*p.think_time)
        self.close_connections()

    def run(self) -> None:
        self.preamble()
        while not self.done():
            self.trace()
            if self.done():
                break
            if self.r.random() < self.p.api_exec_p:
                self.api_execs()
            self.tick(*self.p.think_time)
        self.close_connections()
        self.transport("network.lifecycle", None, {"state": "stopped"})


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SampleSummary:
    """What ``write_sample_ledger`` wrote."""

    directory: Path
    seed: int
    mix: str
    codec: str
    bodies: int                 # event_body_blobs rows
    raw_bytes: int              # sum of their lengths (what readers get back)
    archive_bytes: int          # size of session.bodies
    compression_ratio: float    # raw_bytes / archive_bytes
    rows: dict[str, int]        # rows per table, body index tables included
    seconds: float              # wall time to write
    started_at: str             # the session's first and last timestamps (fake clock)
    ended_at: str

    @property
    def bodies_per_second(self) -> float:
        return self.bodies / self.seconds if self.seconds > 0 else 0.0

    @property
    def raw_mb_per_second(self) -> float:
        return self.raw_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        return (f"{self.directory}: {self.mix} sample, seed {self.seed}, codec {self.codec}\n"
                f"  bodies         {self.bodies:,}\n"
                f"  raw bytes      {self.raw_bytes:,} ({self.raw_bytes / MIB:.1f} MiB)\n"
                f"  archive bytes  {self.archive_bytes:,} ({self.archive_bytes / MIB:.1f} MiB)\n"
                f"  ratio          {self.compression_ratio:.2f}x\n"
                f"  rows           {sum(self.rows.values()):,} in {len(self.rows)} tables\n"
                f"  seconds        {self.seconds:.2f} ({self.bodies_per_second:,.0f} bodies/s, "
                f"{self.raw_mb_per_second:.1f} MB/s raw)\n"
                f"  session time   {self.started_at} .. {self.ended_at}")


def _refuse_existing(directory: Path) -> None:
    for name in ("session.db", "session.bodies"):
        if os.path.lexists(directory / name):
            raise LedgerError("a ledger already exists here; refusing to overwrite it with a sample",
                              directory / name)


def write_sample_ledger(directory: os.PathLike[str] | str, *, seed: int = 0, mix: Mix = "realistic",
                        bodies: int | None = None, raw_bytes: int | None = None, codec: str = "deflate",
                        start_time: float = DEFAULT_START_TIME,
                        progress: Callable[[int, int], None] | None = None,
                        on_close: Callable[[Any], object] | None = None) -> SampleSummary:
    """Write one deterministic sample session ledger into ``directory`` (created if needed).

    Generation stops once ``bodies`` bodies or ``raw_bytes`` raw body bytes are written,
    whichever comes first (the turn in progress is finished so every tool call gets its
    response); with neither, the mix's default size. Refuses to touch an existing ledger."""
    if mix not in _PROFILES:
        raise ValueError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    if bodies is not None and bodies <= 0:
        raise ValueError("bodies must be positive")
    if raw_bytes is not None and raw_bytes <= 0:
        raise ValueError("raw_bytes must be positive")
    if bodies is None and raw_bytes is None:
        bodies, raw_bytes = _DEFAULT_TARGETS[mix]
    directory = Path(directory)
    _refuse_existing(directory)
    began = time.perf_counter()
    clock_box: list[_Session] = []
    writer = LedgerWriter(directory, codec=codec, clock=lambda: clock_box[0].now, on_close=on_close)
    try:
        session = _Session(writer, Body, seed=seed, mix=mix, start_time=start_time, target_bodies=bodies,
                           target_raw=raw_bytes, progress=progress)
        clock_box.append(session)
        session.run()
    except BaseException:
        writer.close()
        raise
    writer.close()
    seconds = time.perf_counter() - began
    rows = dict(sorted(session.c.rows.items()))
    db = directory / "session.db"
    conn = _db.connect_readonly(db)
    try:
        n_bodies, raw = conn.execute("SELECT COUNT(*), COALESCE(SUM(body_len), 0) FROM event_body_blobs").fetchone()
        rows["event_body_blobs"] = n_bodies
        rows["body_blocks"] = conn.execute("SELECT COUNT(*) FROM body_blocks").fetchone()[0]
    finally:
        conn.close()
    archive = directory / "session.bodies"
    archive_bytes = archive.stat().st_size if archive.exists() else 0
    return SampleSummary(directory, seed, mix, codec, n_bodies, raw, archive_bytes,
                         raw / archive_bytes if archive_bytes else 0.0, rows, seconds,
                         ledger_time(start_time), ledger_time(session.now))


# --------------------------------------------------------------------------------------------
# A whole Capsem home
# --------------------------------------------------------------------------------------------

HomeCategory = Literal["stopped", "running", "crashed", "vacuumed", "persistent"]

# The first five cover every kind of session; later ones repeat the common kinds.
_HOME_FIRST: tuple[str, ...] = ("stopped", "persistent", "vacuumed", "running", "crashed")
_HOME_CYCLE: tuple[str, ...] = ("stopped", "vacuumed", "stopped", "persistent", "crashed", "stopped", "running")
_VM_NAMES: tuple[str, ...] = ("co-work1", "code-vm1", "research-2", "data-lab", "review-box", "scratch-3")


@dataclass(frozen=True)
class HomeSession:
    """One session of a sample home, as main.db and the run directory describe it."""

    id: str
    name: str | None            # display name of a persistent VM; None for an ephemeral session
    kind: str                   # "ephemeral" | "persistent"
    category: HomeCategory
    status: str                 # main.db status: running | stopped | crashed
    ledger_dir: Path | None     # None once vacuumed (stats only in main.db)
    created_at: str
    stopped_at: str | None
    rolled_up: bool
    sample: SampleSummary


@dataclass(frozen=True)
class HomeSummary:
    """What ``write_sample_home`` laid out."""

    home: Path
    main_db: Path
    sessions: tuple[HomeSession, ...]
    seconds: float

    def describe(self) -> str:
        lines = [f"{self.home}: sample CAPSEM_HOME with {len(self.sessions)} sessions "
                 f"({self.seconds:.2f} s), main.db at {self.main_db}"]
        for s in self.sessions:
            where = str(s.ledger_dir.relative_to(self.home)) if s.ledger_dir else "(vacuumed: main.db only)"
            lines.append(f"  {s.id}  {s.status:8s} {s.name or '-':12s} {s.sample.bodies:6d} bodies  {where}")
        return "\n".join(lines)


def write_sample_home(home: os.PathLike[str] | str, *, seed: int = 0, sessions: int = 12,
                      mix: Mix = "realistic", bodies: int | None = None, codec: str = "deflate",
                      start_time: float = DEFAULT_START_TIME) -> HomeSummary:
    """Lay out a whole Capsem home at ``home``: ledgers under ``run/sessions/<id>/`` (ephemeral)
    and ``run/persistent/<name>/`` (named VMs, display name != id), ``sessions/main.db`` with
    one row per session in every status, rolled up for the sessions that stopped cleanly,
    and some vacuumed sessions whose ledger is gone. Small by default: a few hundred bodies per
    session (``bodies`` overrides)."""
    from capsem_core import sessions as sess

    if sessions <= 0:
        raise ValueError("a sample home holds at least one session")
    layout = sess.home_layout(Path(home))
    if os.path.lexists(layout.main_db):
        raise LedgerError("a main.db already exists here; refusing to overwrite it with a sample home",
                          layout.main_db)
    began = time.perf_counter()
    r = random.Random(f"sample home {seed}")
    sess.create_main_db(layout.main_db)
    out: list[HomeSession] = []
    names = list(_VM_NAMES)
    persistent_seen = 0
    t = start_time - sessions * 5 * 3600.0
    for i in range(sessions):
        category = _HOME_FIRST[i] if i < len(_HOME_FIRST) else _HOME_CYCLE[(i - len(_HOME_FIRST)) % len(_HOME_CYCLE)]
        session_id = str(_uuid4(r))
        name = None
        if category == "persistent":
            name = names[persistent_seen % len(names)]
            if persistent_seen >= len(names):
                name += f"-{persistent_seen // len(names) + 1}"
            persistent_seen += 1
            ledger_dir = layout.persistent_root / name
        else:
            ledger_dir = layout.sessions_root / session_id
        created = t + r.uniform(0, 3600)
        created_at = ledger_time(created)
        sess.register_session(layout.main_db, session_id, name=name, mode=r.choice(("cli", "cli", "gui")),
                              status="running", created_at=created_at)
        target = bodies if bodies is not None else r.randint(120, 480)
        summary = write_sample_ledger(ledger_dir, seed=seed * 1_000_003 + i, mix=mix, bodies=target,
                                      codec=codec, start_time=created)
        ended_at = summary.ended_at
        status, stopped_at, rolled = "running", None, False
        if category in ("stopped", "vacuumed") or (category == "persistent" and persistent_seen % 2 == 0):
            status, stopped_at = "stopped", ended_at
            sess.mark_session(layout.main_db, session_id, status, ended_at)
            sess.rollup(layout.main_db, session_id, ledger_dir / "session.db")
            rolled = True
        elif category == "crashed":
            # A crashed VM never ran its stop path, so nothing rolled its totals up.
            status, stopped_at = "crashed", ended_at
            sess.mark_session(layout.main_db, session_id, status, ended_at)
        kept: Path | None = ledger_dir
        if category == "vacuumed":
            shutil.rmtree(ledger_dir)
            kept = None
        out.append(HomeSession(session_id, name, "persistent" if name else "ephemeral", category, status, kept,
                               created_at, stopped_at, rolled, summary))
        t += 5 * 3600.0
    return HomeSummary(Path(home), layout.main_db, tuple(out), time.perf_counter() - began)


def _uuid4(r: random.Random) -> str:
    return str(uuid.UUID(int=r.getrandbits(128), version=4))


# --------------------------------------------------------------------------------------------
# capsem-ledger sample
# --------------------------------------------------------------------------------------------

def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _prepare_directory(directory: Path) -> None:
    """Make ``directory`` exist as a directory before anything is written into it. A path
    that is a file, lies under a file or cannot be created is a LedgerError naming it."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise LedgerError(f"cannot be used as a directory: {exc.strerror}", directory) from None
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise LedgerError("exists and is not a directory; refusing to write a sample there", directory)
        return
    try:
        os.makedirs(directory)
    except OSError as exc:
        raise LedgerError(f"cannot create the directory: {exc.strerror}", exc.filename or directory) from None


def add_sample_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR",
                        help="ledger directory to write, created if missing (with --home: the CAPSEM_HOME to lay "
                             "out); an existing ledger or main.db there is never overwritten")
    parser.add_argument("--seed", type=int, default=0, help="generation seed (same seed, same bytes); default 0")
    parser.add_argument("--mix", choices=MIXES, default="realistic",
                        help="realistic sessions, many small bodies (100-300 B) or large bodies; default realistic")
    parser.add_argument("--bodies", type=_positive_int, help="stop once this many bodies are written")
    parser.add_argument("--raw-bytes", type=_size_arg, metavar="SIZE",
                        help="stop once this many raw body bytes are written (e.g. 64M, 1G)")
    parser.add_argument("--codec", choices=("deflate", "zstd"), default="deflate",
                        help="archive codec; zstd is this project's extension, which Capsem cannot read")
    parser.add_argument("--home", action="store_true",
                        help="lay out a whole CAPSEM_HOME at DIR (main.db, ephemeral and persistent ledgers)")
    parser.add_argument("--sessions", type=_positive_int, default=12, help="sessions in a --home layout; default 12")
    parser.add_argument("--progress", action="store_true", help="report progress on stderr")


def run_sample(args: argparse.Namespace) -> int:
    from capsem_core.cli.errors import Terminated, UsageError

    if not args.directory:
        raise UsageError("DIR is empty: name the directory to write (\"\" is not the current directory)")
    if args.home and args.raw_bytes is not None:
        raise UsageError("--raw-bytes applies to one ledger, not to --home")
    _prepare_directory(Path(args.directory))
    # The writers' warnings are shown after a normal run; after an interrupt the one line below
    # says all there is to say (an interrupted writer takes its archive out of service).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text = _write_sample(args)
        except (KeyboardInterrupt, Terminated) as e:
            code, what = (130, "interrupted") if isinstance(e, KeyboardInterrupt) else (143, "terminated")
            print(f"capsem-ledger sample: {what}; {sanitize(args.directory)} holds a partial sample whose "
                  "ledgers check sound (every body committed before the signal is whole)", file=sys.stderr)
            return code
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    print(text)
    return 0


def _write_sample(args: argparse.Namespace) -> str:
    if args.home:
        return write_sample_home(args.directory, seed=args.seed, sessions=args.sessions, mix=args.mix,
                                 bodies=args.bodies, codec=args.codec).describe()

    def progress(n: int, raw: int) -> None:
        print(f"  ... {n:,} bodies, {raw / MIB:,.1f} MiB raw", file=sys.stderr, flush=True)

    return write_sample_ledger(args.directory, seed=args.seed, mix=args.mix, bodies=args.bodies,
                               raw_bytes=args.raw_bytes, codec=args.codec,
                               progress=progress if args.progress else None).describe()
