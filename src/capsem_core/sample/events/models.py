"""Model exchanges of a sample session: each agent's system prompt and tools, the replies a
model gives (text, reasoning, tool calls with their arguments), and every row Capsem writes
about one provider exchange: the credential substitution, the HTTP exchange, the model call,
its items, the tool responses it carried and the native tool calls it asked for.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from capsem_core._native._blake3 import hexdigest as b3hex
from capsem_core.sample.encoding import PREVIEW_CAP, cap, jdump
from capsem_core.sample.events.network import Network
from capsem_core.sample.events.recorder import Ctx, Recorder
from capsem_core.sample.events.security import Security
from capsem_core.sample.pools import FS_TOP, IDENT_NOUNS, IDENT_VERBS, MODULES, SHELL_CMDS
from capsem_core.sample.providers import (MCP_TOOL, TOOL_NAMES, TOOL_PARAMS, Conversation, Provider, Reply,
                                          ToolResult, ToolUse, sse_anthropic, sse_google, sse_openai)
from capsem_core.sample.units import KIB
from capsem_core.writer import ledger_timestamp as ledger_time


class Models:
    """The agents of a session and their model calls; numbers the calls and their items."""

    def __init__(self, rec: Recorder, network: Network, security: Security) -> None:
        self.rec = rec
        self.network = network
        self.security = security
        self.next_model_call_id = 1
        self.seen_kinds: set[str] = set()
        self.items_seen: set[tuple[str, str, str]] = set()
        self.snapshot_n = 0
        self.agent_specs: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
        self.kind_names = [k for k, _ in rec.p.tool_weights]
        self.kind_cum = list(accumulate(w for _, w in rec.p.tool_weights))

    def new_trace(self) -> None:
        """Items are unique per trace: a new trace may repeat what an earlier one said."""
        self.items_seen = set()

    def agent_spec(self, prov: Provider) -> tuple[str, list[tuple[str, str, str]]]:
        """The system prompt and tool definitions an agent sends with every request."""
        spec = self.agent_specs.get(prov.name)
        if spec is None:
            r = random.Random(f"{prov.name} agent spec")  # the same agent build in every sample
            system = ("You are an interactive coding agent running inside a Capsem sandbox. "
                      + self.rec.pools.prose(r, self.rec.p.system_bytes))
            tools = []
            for kind in self.kind_names:
                params = TOOL_PARAMS[kind]
                schema = jdump({"type": "object", "properties": {
                    k: {"type": t, "description": self.rec.pools.sentences_k(r, 1)} for k, t in params.items()},
                    "required": list(params)[:1], "additionalProperties": False})
                tools.append((TOOL_NAMES[prov.name][kind], self.rec.pools.prose(r, self.rec.p.tool_desc_bytes), schema))
            spec = (system, tools)
            self.agent_specs[prov.name] = spec
        return spec

    def call_id(self, prov: Provider, name: str) -> str:
        if prov.name == "anthropic":
            return "toolu_01" + self.rec.b58(22)
        if prov.name == "openai":
            return "call_" + self.rec.alnum(24)
        return f"{name}-{self.rec.ms()}-{self.rec.hexid(13)}"

    def choose_kinds(self, k: int) -> list[str]:
        kinds = self.rec.r.choices(self.kind_names, cum_weights=self.kind_cum, k=k)
        want = [x for x in ("mcp_search", "builtin_exec", "shell") if x in self.kind_names]
        seen = self.seen_kinds
        for i, forced in enumerate(x for x in want if x not in seen and x not in kinds):
            if i < len(kinds):
                kinds[i] = forced
        seen.update(kinds)
        return kinds

    def make_args(self, kind: str) -> tuple[dict[str, Any], str]:
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        path = f"{FS_TOP}/{r.choice(P.paths)}"
        detail = ""
        if kind in ("shell", "builtin_exec"):
            detail = r.choice(list(SHELL_CMDS))
            cmd = r.choice(SHELL_CMDS[detail])
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
            size = r.randint(100, 200) if p.tiny else self.rec.logu(*p.file_bytes)
            args = {"file_path": path, "content": P.code_text(r, size)}
        elif kind == "grep":
            args = {"pattern": f"{r.choice(IDENT_VERBS)}_{r.choice(IDENT_NOUNS)}", "path": "src",
                    "output_mode": "content"}
        elif kind == "glob":
            args = {"pattern": r.choice(["**/*.py", "tests/**/*.py", "cext/*.c", "docs/*.md"])}
        elif kind == "web":
            args = {"url": f"https://docs.python.org/3/library/{r.choice(MODULES)}.html",
                    "prompt": P.sentences_k(r, 1)}
        elif kind == "todo":
            n = 1 if p.tiny else r.randint(2, 6)
            args = {"todos": [{"content": P.sentences_k(r, 1)[:70], "status": r.choice(
                ["pending", "in_progress", "completed"]), "id": str(i + 1)} for i in range(n)]}
        elif kind == "mcp_search":
            args = {"owner": "capsem-dev", "repo": "capsem-core",
                    "query": f"{r.choice(IDENT_VERBS)} {r.choice(IDENT_NOUNS)} is:open"}
        elif kind == "mcp_file":
            args = {"owner": "capsem-dev", "repo": "capsem-core", "path": r.choice(P.paths)}
        else:  # builtin_snapshot
            self.snapshot_n += 1
            args = {"name": f"checkpoint-{self.snapshot_n}"}
        return args, detail

    def make_reply(self, prov: Provider, final: bool) -> Reply:
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        k = 0 if final else r.randint(*p.tools)
        thinking = None
        if prov.name != "openai" and p.thinking_sentences[1] > 0 and r.random() < 0.7:
            thinking = P.sentences_k(r, r.randint(max(1, p.thinking_sentences[0]), p.thinking_sentences[1]))
        text: str | None = P.sentences_k(r, r.randint(*p.reply_sentences))
        if k and r.random() < 0.35:
            text = None
        uses = []
        for i, kind in enumerate(self.choose_kinds(k)):
            name = TOOL_NAMES[prov.name][kind]
            args, detail = self.make_args(kind)
            uses.append(ToolUse(self.call_id(prov, name), kind, name, args, jdump(args), i, detail))
        if prov.name == "anthropic":
            stop = "tool_use" if uses else "end_turn"
        elif prov.name == "openai":
            stop = "tool_calls" if uses else "stop"
        else:
            stop = "STOP"
        return Reply(thinking, text, uses, stop)

    def model_item(self, ctx: Ctx, prov: Provider, kind: str, idx: int, call_id: str,
                   tool_name: str | None, arguments: str | None, content: str | None) -> None:
        material = jdump({"kind": kind, "call_id": call_id, "tool_name": tool_name, "arguments": arguments,
                           "content": content})
        h = "blake3:" + b3hex(material.encode())
        key = (kind, h, call_id)
        if key in self.items_seen:  # UNIQUE(trace_id, kind, content_hash, call_id): replays are not new
            return
        self.items_seen.add(key)
        limit = PREVIEW_CAP if kind == "tool_response" else 64 * KIB
        self.rec.insert("model_items", {
            "event_id": self.rec.eid(), "model_call_id": ctx.model_call_id, "timestamp": self.rec.ts(),
            "provider": prov.name, "model": prov.model, "path": prov.path, "trace_id": ctx.trace_id,
            "turn_id": ctx.turn_id, "kind": kind, "item_index": idx, "call_id": call_id,
            "tool_name": tool_name, "arguments": cap(arguments, 64 * KIB), "content": cap(content, limit),
            "content_hash": h, "credential_ref": self.rec.creds[prov.name],
        })

    def model_call(self, conv: Conversation, ctx: Ctx, pending: Sequence[ToolResult], final: bool,
                   state: dict[str, int]) -> Reply:
        """One provider exchange: the request with the whole history, the streamed reply, and
        every row Capsem writes about it."""
        r, prov = self.rec.r, conv.prov
        cred = self.rec.creds[prov.name]
        request = conv.request()
        reply = self.make_reply(prov, final)
        signature = self.rec.b58(88) if reply.thinking else ""
        in_tok = max(1, int(len(request) / 3.6))
        cache_read = min(state.get("prev_input", 0), in_tok - 1) if prov.name != "google" or in_tok > 4096 else 0
        think_tok = int(len(reply.thinking) / 3.8) if reply.thinking else 0
        out_tok = 1 + think_tok + int((len(reply.text or "") + sum(len(u.args_json) for u in reply.uses)) / 3.8)
        usage = {"input": in_tok, "cache_read": max(cache_read, 0), "thinking": think_tok, "output": out_tok}
        state["prev_input"] = in_tok
        if prov.name == "anthropic":
            message_id = "msg_01" + self.rec.b58(22)
            response = sse_anthropic(message_id, prov.model, usage, reply, signature, self.rec.p.delta_width)
        elif prov.name == "openai":
            message_id = "chatcmpl-" + self.rec.alnum(29)
            response = sse_openai(message_id, int(self.rec.now), prov.model, "fp_" + self.rec.hexid(10), usage, reply,
                                   self.rec.p.delta_width)
        else:
            message_id = self.rec.alnum(22)
            response = sse_google(message_id, prov.model, usage, reply, max(self.rec.p.delta_width * 4, 120))
        duration_ms = int(r.uniform(350, 2500) + out_tok / r.uniform(40, 110) * 1000)
        started = self.rec.now
        # The credential broker swaps the guest's placeholder for the real key on the way out.
        self.rec.insert("substitution_events", {
            "event_id": self.rec.eid(), "timestamp": self.rec.ts(), "material_class": "api_key",
            "source": "host_keychain", "event_type": "http.request", "algorithm": "blake3",
            "substitution_ref": cred, "outcome": "injected", "provider": prov.name, "confidence": 1.0,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "context_json": jdump({"header": prov.key_header, "domain": prov.domain}),
        })
        self.rec.now += duration_ms / 1000.0
        self.network.net(ctx, prov.process, ctx.pid, prov.domain, "POST", prov.path, prov.query, 200, request, response,
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
        mc_eid = self.rec.eid()
        self.rec.insert("model_calls", {
            "id": mc_id, "event_id": mc_eid, "timestamp": ledger_time(started), "provider": prov.name,
            "protocol": prov.name, "model": prov.model, "process_name": prov.process, "pid": ctx.pid,
            "method": "POST", "path": prov.path, "stream": 1, "system_prompt_preview": conv.system[:PREVIEW_CAP],
            "messages_count": conv.messages_count, "tools_count": conv.n_tools, "request_bytes": len(request),
            "request_body_preview": preview, "message_id": message_id, "status_code": 200,
            "text_content": cap(reply.text, 64 * KIB), "thinking_content": cap(reply.thinking, 64 * KIB),
            "stop_reason": reply.stop_reason, "input_tokens": in_tok, "output_tokens": out_tok,
            "duration_ms": duration_ms, "response_bytes": len(response), "estimated_cost_usd": cost,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "usage_details": jdump(details) if details else None, "credential_ref": cred,
        }, [self.rec.body("request", request, "model.call", "application/json"),
            self.rec.body("response", response, "model.call")])
        for res in pending:
            self.rec.insert("tool_responses", {
                "event_id": self.rec.eid(), "model_call_id": mc_id, "call_id": res.call_id,
                "content_preview": res.content[:PREVIEW_CAP], "is_error": int(res.is_error),
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.rec.body("response", res.content.encode(), "model.call")])
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
            if u.kind in MCP_TOOL:
                continue  # recorded, enriched, when the MCP call is made
            self.rec.insert("tool_calls", {
                "event_id": self.rec.eid(), "timestamp": ledger_time(started), "model_call_id": mc_id,
                "provider": prov.name, "status": "observed", "call_index": u.index, "call_id": u.call_id,
                "tool_name": u.name, "arguments": cap(u.args_json, 64 * KIB), "response_preview": None,
                "origin": "native", "transport": "sse", "server_name": "model", "method": None,
                "request_id": None, "decision": "allowed", "duration_ms": duration_ms, "error_message": None,
                "process_name": prov.process, "bytes_sent": 0, "bytes_received": 0, "policy_mode": "enforce",
                "policy_action": "allow", "policy_rule": None, "policy_reason": None,
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            })
        fields: dict[str, object] = {"provider": prov.name, "model": prov.model, "path": prov.path}
        if not self.rec.p.tiny:
            fields.update({"messages_count": conv.messages_count, "tools_count": conv.n_tools,
                           "request_bytes": len(request), "stop_reason": reply.stop_reason,
                           "tool_calls": [u.name for u in reply.uses], "model_call_id": mc_id})
        self.security.secure(ctx, mc_eid, "model.call", self.security.payload(ctx, mc_eid, "model.call", fields),
                    "model.allow.agents", stages=1, cred=cred)
        conv.add_reply(reply, signature)
        return reply
