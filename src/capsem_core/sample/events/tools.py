"""Tool runs of a sample session: what each native tool does in the guest (shell commands
with their processes, files and downloads; reads, edits, web fetches), MCP tool calls and the
MCP handshake, and the result each returns to the model.
"""

from __future__ import annotations

import json

from capsem_core.sample.encoding import cap_bytes_text, fit, jdump
from capsem_core.sample.events.network import Network
from capsem_core.sample.events.processes import Processes
from capsem_core.sample.events.recorder import Ctx, Recorder
from capsem_core.sample.events.security import Security
from capsem_core.sample.pools import EXE, FS_TOP, MCP_URL
from capsem_core.sample.providers import MCP_TOOL, ToolResult, ToolUse
from capsem_core.writer import ledger_timestamp as ledger_time


class Tools:
    """Runs the tools a model called; numbers the JSON-RPC requests of MCP."""

    def __init__(self, rec: Recorder, network: Network, processes: Processes, security: Security) -> None:
        self.rec = rec
        self.network = network
        self.processes = processes
        self.security = security
        self.jsonrpc_id = 0

    def sized(self, budget: int) -> int:
        return min(self.rec.logu(*self.rec.p.result_bytes), budget)

    def numbered(self, text: str, first: int = 1) -> str:
        return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(text.split("\n"), first))

    def run_tool(self, use: ToolUse, ctx: Ctx, budget: int) -> ToolResult:
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        kind = use.kind
        if kind in MCP_TOOL:
            return self.run_mcp(use, ctx, budget)
        prov = ctx.prov
        assert prov is not None
        err = False
        if kind == "shell":
            return self.run_shell(use, ctx, budget)
        if kind == "read":
            self.rec.tick(0.005, 0.04)
            text = self.rec.tiny(P.code_text(r, 200)) if p.tiny else self.numbered(
                P.code_text(r, min(self.rec.logu(*p.file_bytes), budget)))
        elif kind == "edit":
            self.rec.tick(0.01, 0.08)
            self.processes.fs(ctx, "modified", use.args["file_path"], r.randint(400, 60_000))
            head = f"The file {use.args['file_path']} has been updated. "
            text = self.rec.tiny(head + use.args["new_string"]) if p.tiny else (
                head + "Here's the result of running `cat -n` on a snippet of the edited file:\n"
                + self.numbered(P.code_text(r, min(self.sized(budget), 6000)), r.randint(1, 400)))
        elif kind == "write":
            self.rec.tick(0.01, 0.1)
            self.processes.fs(ctx, "created", use.args["file_path"], len(use.args["content"].encode()))
            text = f"File created successfully at: {use.args['file_path']}"
            if p.tiny:
                text = self.rec.tiny(text)
        elif kind == "grep":
            self.rec.tick(0.02, 0.6)
            text = self.rec.tiny(self.processes.output("grep", 200)) if p.tiny else self.processes.output("grep", self.sized(budget))
        elif kind == "glob":
            self.rec.tick(0.01, 0.2)
            k = 4 if p.tiny else max(1, self.sized(budget) // 40)
            text = "\n".join(f"{FS_TOP}/{x}" for x in r.choices(P.paths, k=k))
            if p.tiny:
                text = self.rec.tiny(text)
        elif kind == "web":
            text, err = self.run_web(use, ctx, budget)
        elif kind == "todo":
            self.rec.tick(0.001, 0.01)
            text = ("Todos have been modified successfully. Ensure that you continue to use the todo list "
                    "to track your progress. Please proceed with the current tasks if applicable")
            if p.tiny:
                text = self.rec.tiny(text)
        else:
            raise AssertionError(f"no runner for tool kind {kind}")
        return ToolResult(use.call_id, use.name, text, err)

    def run_shell(self, use: ToolUse, ctx: Ctx, budget: int) -> ToolResult:
        r, p = self.rec.r, self.rec.p
        prov = ctx.prov
        assert prov is not None
        cmd: str = use.args["command"]
        detail = use.detail or "ls"
        bash_pid, _ = self.processes.audit(ctx, "/usr/bin/bash", ["bash", "-c", cmd], ctx.pid, f"/usr/local/bin/{prov.process}")
        child_pid, child_eid = self.processes.audit(ctx, EXE[detail], cmd.split(), bash_pid, "/usr/bin/bash")
        fields: dict[str, object] = {"exe": EXE[detail], "argv": cmd.split()[:8]}
        if not p.tiny:
            fields.update({"pid": child_pid, "ppid": bash_pid, "cwd": FS_TOP, "uid": 1000})
        payload = self.security.payload(ctx, child_eid, "process.audit", fields)
        rule = ("process.ask.git-push" if cmd.startswith("git push")
                else "process.log.package-install" if detail == "pip" else None)
        verdict = self.security.secure(ctx, child_eid, "process.audit", payload, rule, stages=1,
                              ask_approved=r.random() < 0.7)
        if verdict == "block":
            return ToolResult(use.call_id, use.name, "Error: the command was blocked by the Capsem policy "
                               "rule process.ask.git-push (denied by the user).", True)
        size = 200 if p.tiny else self.sized(budget)
        if detail == "pip":
            pkg = cmd.split()[-1].strip(".") or "capsem-core"
            listing = "\n".join(f'<a href="https://files.pythonhosted.org/packages/{self.rec.hexid(2)}/{self.rec.hexid(2)}/'
                                f'{pkg}-{i}.{r.randint(0, 9)}.0-py3-none-any.whl">{pkg}-{i}.0</a><br/>'
                                for i in range(2 if p.tiny else r.randint(5, 60)))
            self.rec.tick(0.05, 0.6)
            self.network.net(ctx, "pip", child_pid, "pypi.org", "GET", f"/simple/{pkg}/", None, 200, None,
                     listing.encode(), None, "text/html", r.randint(40, 300), rule="net.allow.dev-registries")
            if p.download_p and r.random() < p.download_p * 4:
                self.network.download(ctx, "pip", child_pid, "files.pythonhosted.org",
                              f"/packages/{self.rec.hexid(2)}/{self.rec.hexid(2)}/{self.rec.hexid(60)}/{pkg}-1.0-py3-none-any.whl",
                              self.rec.logu(*p.download_bytes))
            self.processes.fs_burst(ctx, "/usr/local/lib/python3.11/site-packages/" + pkg.replace("-", "_"),
                          r.randint(4, 20) if p.tiny else r.randint(10, 3 * p.fs_window))
        elif detail == "build":
            self.processes.fs_burst(ctx, f"{FS_TOP}/build", r.randint(2, 12) if p.tiny else self.rec.logu(10, 3 * p.fs_window))
        elif detail == "pytest":
            self.processes.fs(ctx, "modified", f"{FS_TOP}/.pytest_cache/v/cache/lastfailed", r.randint(2, 900))
        elif detail == "git" and cmd.startswith("git push"):
            self.network.net(ctx, "git", child_pid, "github.com", "POST", "/capsem-dev/capsem-core.git/git-receive-pack",
                     None, 200, self.rec.r.randbytes(r.randint(150, 300) if p.tiny else min(self.rec.logu(2000, 200_000), budget)),
                     b"000eunpack ok\n0019ok refs/heads/main\n0000", "application/x-git-receive-pack-request",
                     "application/x-git-receive-pack-result", r.randint(200, 3000),
                     rule="net.allow.dev-registries")
        text = self.processes.output(detail, size)
        if p.tiny:
            text = self.rec.tiny(text)
        exit_code = 1 if (detail == "pytest" and "FAILED" in text) else 0
        if p.tiny:
            self.rec.tick(0.05, 2.0)
        else:
            self.rec.tick(0.2, 25.0)
        if exit_code:
            text += f"\nExit code {exit_code}" if not p.tiny else ""
        return ToolResult(use.call_id, use.name, text, bool(exit_code))

    def run_web(self, use: ToolUse, ctx: Ctx, budget: int) -> tuple[str, bool]:
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        prov = ctx.prov
        assert prov is not None
        x = r.random()
        if x < 0.05:
            domain, rule, approved = "pastebin.com", "net.ask.paste-sites", False
        else:
            domain, rule, approved = ("sqlite.org" if x < 0.2 else "docs.python.org"), "net.allow.dev-registries", True
        path = "/" + use.args["url"].split("/", 3)[-1] if domain == "docs.python.org" else "/lang_transaction.html"
        if domain == "pastebin.com":
            path = "/raw/" + self.rec.alnum(8)
        if not approved:
            self.network.net(ctx, prov.process, ctx.pid, domain, "GET", path, None, 403, None,
                     b'{"error":"blocked by capsem network policy"}', None, "application/json", r.randint(1, 9),
                     rule=rule, decision="denied", ask_approved=False)
            return f"Request failed with status code 403: {domain} was blocked by the Capsem network policy.", True
        page_size = min(self.rec.logu(*p.file_bytes), max(budget * 4, 8192))
        paras = P.prose(r, page_size).split(". ")
        html = P.html_head + "".join(f"<p>{s}.</p>\n" for s in paras) + P.html_tail
        took = r.randint(80, 1500)
        self.rec.now += took / 1000.0
        self.network.net(ctx, prov.process, ctx.pid, domain, "GET", path, None, 200, None, html.encode(), None,
                 "text/html; charset=utf-8", took, rule=rule)
        return "# " + P.sentences_k(r, 1) + "\n\n" + P.prose(r, self.sized(budget)), False

    def run_mcp(self, use: ToolUse, ctx: Ctx, budget: int) -> ToolResult:
        """An MCP tools/call: one logical tool call (the model's call id), enriched with the MCP
        server, method and JSON-RPC id, its request and response archived with the row."""
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        prov = ctx.prov
        assert prov is not None
        server, tool = MCP_TOOL[use.kind]
        self.jsonrpc_id += 1
        rid = self.jsonrpc_id
        req = jdump({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                      "params": {"name": tool, "arguments": use.args}}).encode()
        started = self.rec.now
        is_error = False
        if use.kind == "builtin_exec":
            out, code, _ = self.processes.exec_cmd(ctx, use.args["command"], "mcp", use.detail or "ls", "capsem-mcp")
            text = out if p.tiny else f"{out}\n[exit code {code}]"
            if p.tiny:
                text = fit(text, 100, 170, "ok")
            is_error = code != 0
        elif use.kind == "builtin_snapshot":
            self.rec.tick(0.2, 3.0)
            text = jdump({"snapshot": use.args["name"], "files": r.randint(40, 4000),
                           "bytes": r.randint(10_000, 90_000_000), "created_at": self.rec.ts()})
        elif use.kind == "mcp_search":
            self.rec.tick(0.15, 1.5)
            if p.tiny:
                text = fit(jdump({"total_count": r.randint(0, 40), "items": [
                    {"number": r.randint(1, 900), "title": P.sentences[r.randrange(500)][:60], "state": "open"}]}),
                    100, 170, "")
            else:
                n = max(1, self.sized(budget) // 700)
                text = jdump({"total_count": n + r.randint(0, 50), "incomplete_results": False, "items": [
                    {"number": r.randint(1, 900), "title": P.sentences_k(r, 1)[:80], "state": "open",
                     "user": {"login": r.choice(["ana", "bo", "kai", "lee", "sam"])}, "labels": [
                         {"name": r.choice(["bug", "perf", "docs", "ledger"])}],
                     "created_at": ledger_time(self.rec.now - r.randint(3600, 9_000_000)),
                     "body": P.prose(r, 500)} for _ in range(n)]}, )
        else:  # mcp_file
            self.rec.tick(0.1, 1.0)
            text = fit(P.code_text(r, 150), 100, 170, "") if p.tiny else P.code_text(r, self.sized(budget))
        resp = jdump({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": text}], "isError": is_error}}).encode()
        duration = max(1, int((self.rec.now - started) * 1000))
        if server == "github":
            self.network.net(ctx, prov.process, ctx.pid, MCP_URL[0], "POST", MCP_URL[1], None, 200, req,
                     b"event: message\ndata: " + resp + b"\n\n", "application/json", "text/event-stream",
                     duration, rule="net.allow.dev-registries", headers={"mcp-session-id": self.rec.user_id[5:41]})
        teid = self.rec.eid()
        origin = "mcp" if server == "github" else "builtin"
        rule = "mcp.allow.github-read" if server == "github" else "mcp.allow.capsem-builtin"
        self.rec.insert("tool_calls", {
            "event_id": teid, "timestamp": ledger_time(started), "model_call_id": ctx.model_call_id,
            "provider": prov.name, "status": "error" if is_error else "responded", "call_index": use.index,
            "call_id": use.call_id, "tool_name": tool, "arguments": cap_bytes_text(req),
            "response_preview": cap_bytes_text(resp), "origin": origin,
            "transport": "http" if server == "github" else "vsock_frame", "server_name": server,
            "method": "tools/call", "request_id": str(rid), "decision": "allowed", "duration_ms": duration,
            "error_message": "command exited with a non-zero status" if is_error else None,
            "process_name": prov.process, "bytes_sent": len(req), "bytes_received": len(resp),
            "policy_mode": "enforce", "policy_action": "allow", "policy_rule": rule,
            "policy_reason": "tool allowed by the profile", "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "credential_ref": None,
        }, [self.rec.body("request", req, "mcp.tool_call", "application/json"),
            self.rec.body("response", resp, "mcp.tool_call", "application/json")])
        fields: dict[str, object] = {"server": server, "tool": tool, "request_id": rid}
        if not p.tiny:
            fields.update({"arguments": use.args, "call_id": use.call_id, "transport": "http"})
        self.security.secure(ctx, teid, "mcp.tool_call", self.security.payload(ctx, teid, "mcp.tool_call", fields), rule, stages=2)
        return ToolResult(use.call_id, use.name, text, is_error)

    def mcp_handshake(self, ctx: Ctx, process: str, pid: int) -> None:
        """initialize and tools/list against the GitHub MCP server: protocol facts, recorded as
        security events whose payload carries the exchange."""
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
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
            req = jdump({"jsonrpc": "2.0", "id": self.jsonrpc_id, "method": method, "params": params}).encode()
            resp = jdump({"jsonrpc": "2.0", "id": self.jsonrpc_id, "result": result}).encode()
            took = r.randint(60, 400)
            self.rec.now += took / 1000.0
            self.network.net(ctx, process, pid, MCP_URL[0], "POST", MCP_URL[1], None, 200, req,
                     b"event: message\ndata: " + resp + b"\n\n", "application/json", "text/event-stream", took,
                     rule="net.allow.dev-registries", stages=1)
            eid = self.rec.eid()
            fields: dict[str, object] = {"server": "github", "method": method}
            if p.tiny:
                fields["tools"] = len(tools) if method == "tools/list" else None
            else:
                fields.update({"request": json.loads(req), "response": json.loads(resp)})
            self.security.secure(ctx, eid, event_type, self.security.payload(ctx, eid, event_type, fields), "mcp.log.protocol",
                        stages=1)
