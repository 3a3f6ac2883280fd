"""The AI providers a sample agent talks to, and the exact bytes of their exchanges.

Per provider (Anthropic ``/v1/messages``, OpenAI ``/v1/chat/completions``, Google
``:streamGenerateContent``): the endpoint, model, agent process and prices; the name each
agent gives every tool kind; the JSON request, which carries the whole conversation so far
(``Conversation``); and the SSE response in that provider's event shapes (``sse_*``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from capsem_core.sample.encoding import jdump, jstr

@dataclass(frozen=True)
class Provider:
    """One AI provider as an agent reaches it."""

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


PROVIDERS: dict[str, Provider] = {
    "anthropic": Provider("anthropic", "api.anthropic.com", "/v1/messages", None,
                          "claude-sonnet-4-20250514", "claude", "claude-cli/1.0.51 (external, cli)",
                          3e-6, 0.3e-6, 15e-6, "x-api-key"),
    "openai": Provider("openai", "api.openai.com", "/v1/chat/completions", None,
                       "gpt-4.1-2025-04-14", "codex", "codex_cli_rs/0.2.0",
                       2e-6, 0.5e-6, 8e-6, "authorization"),
    "google": Provider("google", "generativelanguage.googleapis.com",
                       "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "alt=sse",
                       "gemini-2.5-pro", "gemini", "GeminiCLI/0.1.12 (linux; x64)",
                       1.25e-6, 0.31e-6, 10e-6, "x-goog-api-key"),
}

# Tool kinds and the name each agent gives them. MCP tools are named by the MCP server's
# tool name in tool_calls; the model sees the agent's prefixed name.
TOOL_NAMES: dict[str, dict[str, str]] = {
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
# MCP tool kinds: (server, the tool name the server knows).
MCP_TOOL = {"mcp_search": ("github", "search_issues"), "mcp_file": ("github", "get_file_contents"),
            "builtin_exec": ("capsem", "exec"), "builtin_snapshot": ("capsem", "snapshot")}
# The parameters each tool kind declares to the model.
TOOL_PARAMS: dict[str, dict[str, str]] = {
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
class ToolUse:
    """A tool call in a model reply."""

    call_id: str
    kind: str
    name: str              # what the model called it
    args: dict[str, Any]
    args_json: str
    index: int
    detail: str = ""          # what kind of command a shell tool runs


@dataclass
class ToolResult:
    """What a tool returned, as the next request carries it back to the model."""

    call_id: str
    name: str
    content: str
    is_error: bool


@dataclass
class Reply:
    """One model reply: its reasoning, text and tool calls."""

    thinking: str | None
    text: str | None
    uses: list[ToolUse]
    stop_reason: str


_ERR_FLAG = ',"is_error":true'


class Conversation:
    """One agent conversation in one provider's request encoding.

    Messages are kept as encoded JSON fragments so a request, which carries the whole
    history, is one join however long the history is."""

    def __init__(self, prov: Provider, system: str, tools: list[tuple[str, str, str]], user_id: str) -> None:
        self.prov = prov
        self.system = system
        self.msgs: list[bytes] = []
        self.msg_bytes = 0
        self.n_tools = len(tools)
        name = prov.name
        if name == "anthropic":
            tools_json = ",".join(
                f'{{"name":{jstr(t)},"description":{jstr(d)},"input_schema":{p}}}' for t, d, p in tools)
            self.prefix = (f'{{"model":{jstr(prov.model)},"max_tokens":32000,"stream":true,'
                          f'"system":[{{"type":"text","text":{jstr(system)},'
                          f'"cache_control":{{"type":"ephemeral"}}}}],"tools":[{tools_json}],'
                          f'"metadata":{{"user_id":{jstr(user_id)}}},"messages":[').encode()
            self.suffix = b"]}"
        elif name == "openai":
            tools_json = ",".join(
                f'{{"type":"function","function":{{"name":{jstr(t)},"description":{jstr(d)},'
                f'"parameters":{p}}}}}' for t, d, p in tools)
            self.prefix = (f'{{"model":{jstr(prov.model)},"stream":true,"stream_options":'
                          f'{{"include_usage":true}},"parallel_tool_calls":true,"tools":[{tools_json}],'
                          f'"messages":[{{"role":"system","content":{jstr(system)}}}').encode()
            self.suffix = b"]}"
        else:
            decls = ",".join(f'{{"name":{jstr(t)},"description":{jstr(d)},"parameters":{p}}}'
                             for t, d, p in tools)
            self.prefix = (f'{{"systemInstruction":{{"parts":[{{"text":{jstr(system)}}}]}},'
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
            self._add(f'{{"role":"user","content":[{{"type":"text","text":{jstr(text)}}}]}}')
        elif n == "openai":
            self._add(f'{{"role":"user","content":{jstr(text)}}}')
        else:
            self._add(f'{{"role":"user","parts":[{{"text":{jstr(text)}}}]}}')

    def add_reply(self, reply: Reply, signature: str) -> None:
        n = self.prov.name
        if n == "anthropic":
            parts = _reply_parts(
                reply, lambda t: f'{{"type":"thinking","thinking":{jstr(t)},"signature":"{signature}"}}',
                lambda t: f'{{"type":"text","text":{jstr(t)}}}',
                lambda u: f'{{"type":"tool_use","id":"{u.call_id}","name":{jstr(u.name)},"input":{u.args_json}}}')
            self._add(f'{{"role":"assistant","content":[{parts}]}}')
        elif n == "openai":
            content = jstr(reply.text) if reply.text else "null"
            if reply.uses:
                calls = ",".join(f'{{"id":"{u.call_id}","type":"function","function":{{"name":{jstr(u.name)},'
                                 f'"arguments":{jstr(u.args_json)}}}}}' for u in reply.uses)
                self._add(f'{{"role":"assistant","content":{content},"tool_calls":[{calls}]}}')
            else:
                self._add(f'{{"role":"assistant","content":{content}}}')
        else:
            parts = _reply_parts(reply, lambda t: f'{{"text":{jstr(t)},"thought":true}}',
                                 lambda t: f'{{"text":{jstr(t)}}}', _google_call)
            self._add(f'{{"role":"model","parts":[{parts}]}}')

    def add_results(self, results: Sequence[ToolResult]) -> None:
        n = self.prov.name
        if n == "anthropic":
            parts = ",".join(f'{{"type":"tool_result","tool_use_id":"{r.call_id}","content":{jstr(r.content)}'
                             + (_ERR_FLAG if r.is_error else "") + "}" for r in results)
            self._add(f'{{"role":"user","content":[{parts}]}}')
        elif n == "openai":
            for r in results:
                self._add(f'{{"role":"tool","tool_call_id":"{r.call_id}","content":{jstr(r.content)}}}')
        else:
            parts = ",".join(f'{{"functionResponse":{{"id":"{r.call_id}","name":{jstr(r.name)},'
                             f'"response":{{"{"error" if r.is_error else "output"}":{jstr(r.content)}}}}}}}'
                             for r in results)
            self._add(f'{{"role":"user","parts":[{parts}]}}')

    def compact(self, summary: str) -> None:
        """What agents do near the context limit: the history becomes one summary message."""
        self.msgs.clear()
        self.msg_bytes = 0
        self.add_user("This session is being continued from a previous conversation that ran out of "
                      "context. The conversation is summarized below:\n" + summary)


def _reply_parts(reply: Reply, thinking: Callable[[str], str], text: Callable[[str], str],
                 use: Callable[[ToolUse], str]) -> str:
    """A reply's parts in history order (reasoning, text, tool calls), each in a provider's shape."""
    parts = [thinking(reply.thinking)] if reply.thinking else []
    if reply.text:
        parts.append(text(reply.text))
    parts += [use(u) for u in reply.uses]
    return ",".join(parts)


def _google_call(u: ToolUse) -> str:
    """A Gemini functionCall part: the same in a request's history and in a streamed reply."""
    return f'{{"functionCall":{{"id":"{u.call_id}","name":{jstr(u.name)},"args":{u.args_json}}}}}'


def _pieces(s: str, width: int) -> list[str]:
    """``s`` in deltas of ``width`` characters, the way a provider streams it."""
    return [s[i:i + width] for i in range(0, len(s), width)] if s else []


def sse_anthropic(msg_id: str, model: str, usage: dict[str, int], reply: Reply, signature: str,
                  width: int) -> bytes:
    """Anthropic's Messages stream: message_start, a block per thinking / text / tool_use
    (its deltas ``width`` characters each), message_delta with the usage, message_stop."""
    out: list[str] = []
    ev = out.append
    start = {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage["input"] - usage["cache_read"],
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": usage["cache_read"],
                  "output_tokens": 1, "service_tier": "standard"}}}
    ev(f"event: message_start\ndata: {jdump(start)}\n\n")
    idx = 0

    def block_start(block: str) -> None:
        ev(f'event: content_block_start\ndata: {{"type":"content_block_start","index":{idx},'
           f'"content_block":{block}}}\n\n')

    def delta(body: str) -> None:
        ev(f'event: content_block_delta\ndata: {{"type":"content_block_delta","index":{idx},"delta":{body}}}\n\n')

    def block_stop() -> None:
        ev(f'event: content_block_stop\ndata: {{"type":"content_block_stop","index":{idx}}}\n\n')

    if reply.thinking:
        block_start('{"type":"thinking","thinking":""}')
        ev('event: ping\ndata: {"type": "ping"}\n\n')
        for p in _pieces(reply.thinking, width):
            delta(f'{{"type":"thinking_delta","thinking":{jstr(p)}}}')
        delta(f'{{"type":"signature_delta","signature":"{signature}"}}')
        block_stop()
        idx += 1
    if reply.text:
        block_start('{"type":"text","text":""}')
        for p in _pieces(reply.text, width):
            delta(f'{{"type":"text_delta","text":{jstr(p)}}}')
        block_stop()
        idx += 1
    for u in reply.uses:
        block_start(f'{{"type":"tool_use","id":"{u.call_id}","name":{jstr(u.name)},"input":{{}}}}')
        delta('{"type":"input_json_delta","partial_json":""}')
        for p in _pieces(u.args_json, width):
            delta(f'{{"type":"input_json_delta","partial_json":{jstr(p)}}}')
        block_stop()
        idx += 1
    ev(f'event: message_delta\ndata: {{"type":"message_delta","delta":{{"stop_reason":"{reply.stop_reason}",'
       f'"stop_sequence":null}},"usage":{{"output_tokens":{usage["output"]}}}}}\n\n')
    ev('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return "".join(out).encode()


def sse_openai(chat_id: str, created: int, model: str, fingerprint: str, usage: dict[str, int],
               reply: Reply, width: int) -> bytes:
    """OpenAI's chat.completion.chunk stream: role, text and tool-call argument deltas, the
    finish reason, a usage chunk, then ``[DONE]``."""
    head = (f'data: {{"id":"{chat_id}","object":"chat.completion.chunk","created":{created},'
            f'"model":"{model}","service_tier":"default","system_fingerprint":"{fingerprint}","choices":[')
    tail = "]}\n\n"
    out: list[str] = [head + '{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
                      '"logprobs":null,"finish_reason":null}' + tail]
    ev = out.append
    for p in _pieces(reply.text or "", width):
        ev(f'{head}{{"index":0,"delta":{{"content":{jstr(p)}}},"logprobs":null,"finish_reason":null}}{tail}')
    for i, u in enumerate(reply.uses):
        ev(f'{head}{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"id":"{u.call_id}","type":"function",'
           f'"function":{{"name":{jstr(u.name)},"arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}{tail}')
        for p in _pieces(u.args_json, width):
            ev(f'{head}{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"function":{{"arguments":{jstr(p)}}}}}]}},'
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


def sse_google(response_id: str, model: str, usage: dict[str, int], reply: Reply, width: int) -> bytes:
    """Google's streamGenerateContent SSE (CRLF framed): thought and text parts, then the
    function calls with the finish reason and the full usage metadata."""
    pin = usage["input"]
    meta_run = (f'"usageMetadata":{{"promptTokenCount":{pin},"totalTokenCount":{pin},'
                f'"promptTokensDetails":[{{"modality":"TEXT","tokenCount":{pin}}}]}},'
                f'"modelVersion":"{model}","responseId":"{response_id}"')
    out: list[str] = []
    ev = out.append
    for p in _pieces(reply.thinking or "", width):
        ev(f'data: {{"candidates":[{{"content":{{"parts":[{{"text":{jstr(p)},"thought":true}}],'
           f'"role":"model"}},"index":0}}],{meta_run}}}\r\n\r\n')
    for p in _pieces(reply.text or "", width):
        ev(f'data: {{"candidates":[{{"content":{{"parts":[{{"text":{jstr(p)}}}],"role":"model"}},'
           f'"index":0}}],{meta_run}}}\r\n\r\n')
    calls = ",".join(_google_call(u) for u in reply.uses) or '{"text":""}'
    total = pin + usage["output"]
    ev(f'data: {{"candidates":[{{"content":{{"parts":[{calls}],"role":"model"}},"finishReason":'
       f'"{reply.stop_reason}","index":0}}],"usageMetadata":{{"promptTokenCount":{pin},'
       f'"candidatesTokenCount":{usage["output"] - usage["thinking"]},"totalTokenCount":{total},'
       f'"cachedContentTokenCount":{usage["cache_read"]},"promptTokensDetails":[{{"modality":"TEXT",'
       f'"tokenCount":{pin}}}],"thoughtsTokenCount":{usage["thinking"]}}},"modelVersion":"{model}",'
       f'"responseId":"{response_id}"}}\r\n\r\n')
    return "".join(out).encode()
