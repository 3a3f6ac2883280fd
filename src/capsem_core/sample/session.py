"""One sample session, start to end: the network and profile set-up, the clone of the
workspace, then agent traces (turns of model calls and the tools they run) and exec-API
commands between them, until the body or byte target is reached.

The kinds of events are written by collaborators in ``capsem_core.sample.events`` that share
one ``Recorder`` (writer, random source, clock); this module only decides what happens when.
"""

from __future__ import annotations

from capsem_core.sample.encoding import MAX_GENERATED_BODY
from capsem_core.sample.events.models import Models
from capsem_core.sample.events.network import Network
from capsem_core.sample.events.processes import Processes
from capsem_core.sample.events.recorder import Ctx, Progress, Recorder
from capsem_core.sample.events.security import Security
from capsem_core.sample.events.tools import Tools
from capsem_core.sample.pools import FS_TOP, SHELL_CMDS
from capsem_core.sample.profiles import PROFILES
from capsem_core.sample.providers import PROVIDERS, Conversation, ToolResult
from capsem_core.sample.units import KIB, MIB
from capsem_core._native._blake3 import hexdigest as b3hex
from capsem_core.writer import LedgerWriter


class Session:
    """Generates one session's rows and bodies into a writer, in time order."""

    def __init__(self, writer: LedgerWriter, *, seed: int, mix: str, start_time: float,
                 target_bodies: int | None, target_raw: int | None, progress: Progress | None) -> None:
        self.rec = Recorder(writer, seed=seed, profile=PROFILES[mix], start_time=start_time,
                            target_bodies=target_bodies, target_raw=target_raw, progress=progress)
        # The first traces go to every provider once, in an order the seed decides.
        order = list(PROVIDERS)
        self.rec.r.shuffle(order)
        self.provider_queue = order
        self.security = Security(self.rec)
        self.network = Network(self.rec, self.security)
        self.processes = Processes(self.rec, self.security)
        self.models = Models(self.rec, self.network, self.security)
        self.tools = Tools(self.rec, self.network, self.processes, self.security)

    @property
    def now(self) -> float:
        """The fake clock: the writer's clock too, so its timestamps follow the session's."""
        return self.rec.now

    def preamble(self) -> None:
        r, p = self.rec.r, self.rec.p
        self.network.transport("network.lifecycle", None, {"state": "created", "subnet": "10.77.0.0/24"})
        for key in ("api.githubcopilot.com", "sqlite.org"):
            old, new = "allow = []\n", f'allow = ["{key}"]\n'
            self.rec.insert("profile_mutation_events", {
                "timestamp_unix_ms": self.rec.ms(), "mutation_id": self.rec.eid(), "profile_id": "default",
                "actor": "user", "category": "network", "filename": "capsem.toml",
                "affected_path": "~/.capsem/profiles/default/capsem.toml", "target_kind": "domain",
                "target_key": key, "operation": "allow", "rule_id": "net.allow.dev-registries",
                "old_hash": "blake3:" + b3hex(old.encode()), "old_size": len(old),
                "new_hash": "blake3:" + b3hex(new.encode()), "new_size": len(new), "status": "applied",
                "error": None, "trace_id": None,
            })
            self.rec.tick(0.5, 4.0)
        ctx = Ctx(self.rec.hexid(32), None, None, None, self.rec.new_pid())
        self.processes.exec_cmd(ctx, f"git clone https://github.com/capsem-dev/capsem-core {FS_TOP}", "api", "git",
                      "capsem-exec")
        pack = 300 if p.tiny else self.rec.logu(40_000, 400_000) if p.download_p < 0.2 else self.rec.logu(1 * MIB, 6 * MIB)
        self.network.net(ctx, "git", ctx.pid, "github.com", "POST", "/capsem-dev/capsem-core.git/git-upload-pack", None, 200,
                 b"0032want " + self.rec.hexid(40).encode() + b"\n00000009done\n", r.randbytes(pack),
                 "application/x-git-upload-pack-request", "application/x-git-upload-pack-result",
                 r.randint(200, 4000), rule="net.allow.dev-registries")
        self.processes.fs_burst(ctx, f"{FS_TOP}/src", 2 * p.fs_window + r.randint(5, 50))
        self.tools.mcp_handshake(ctx, "claude", ctx.pid)
        self.rec.tick(2.0, 30.0)

    def api_execs(self) -> None:
        r = self.rec.r
        ctx = Ctx(self.rec.hexid(32), None, None, None, self.rec.new_pid())
        for _ in range(r.randint(1, 6 if self.rec.p.tiny else 3)):
            detail = r.choice(("pytest", "git", "ls", "grep"))
            cmd = SHELL_CMDS[detail][0]
            self.processes.exec_cmd(ctx, cmd, "api", detail, "capsem-exec")
            self.rec.tick(0.05, 3.0)
            if self.rec.done():
                break

    def trace(self) -> None:
        r, P, p = self.rec.r, self.rec.pools, self.rec.p
        name = self.provider_queue.pop(0) if self.provider_queue else r.choices(
            ("anthropic", "openai", "google"), weights=(0.5, 0.25, 0.25))[0]
        prov = PROVIDERS[name]
        system, tools = self.models.agent_spec(prov)
        conv = Conversation(prov, system, tools, self.rec.user_id)
        ctx = Ctx(self.rec.hexid(32), None, prov, None, 0)
        self.models.new_trace()
        ctx.pid, _ = self.processes.audit(ctx, f"/usr/local/bin/{prov.process}", [prov.process, "--continue"], 1,
                                "/usr/libexec/capsem-agent", exit_code=None)
        state: dict[str, int] = {}
        for _turn in range(r.randint(*p.turns)):
            ctx.turn_id = self.rec.hexid(32)
            if conv.msg_bytes > p.max_history:
                conv.compact(P.prose(r, min(p.max_history // 20, 40_000)))
                state.clear()
            conv.add_user(P.sentences_k(r, 1 if p.tiny else r.randint(1, 4)))
            pending: list[ToolResult] = []
            steps = r.randint(*p.steps)
            for step in range(steps):
                final = step == steps - 1 or self.rec.done() or conv.msg_bytes > p.max_history
                reply = self.models.model_call(conv, ctx, pending, final, state)
                pending = []
                if not p.tiny and r.random() < 0.08:
                    self.network.telemetry(ctx, prov.process, ctx.pid)
                if not reply.uses:
                    break
                room = MAX_GENERATED_BODY - len(conv.prefix) - conv.msg_bytes - 512 * KIB
                budget = max(4096, room // len(reply.uses))
                pending = [self.tools.run_tool(u, ctx, budget) for u in reply.uses]
                conv.add_results(pending)
            if self.rec.done():
                break
            self.rec.tick(*p.think_time)
        self.network.close_connections()

    def run(self) -> None:
        self.preamble()
        while not self.rec.done():
            self.trace()
            if self.rec.done():
                break
            if self.rec.r.random() < self.rec.p.api_exec_p:
                self.api_execs()
            self.rec.tick(*self.rec.p.think_time)
        self.network.close_connections()
        self.network.transport("network.lifecycle", None, {"state": "stopped"})
