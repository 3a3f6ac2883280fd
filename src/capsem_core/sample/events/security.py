"""Security rows of a sample session: the policy it runs under, rule matches, the decision
chain of every event, and asks resolved by the user.
"""

from __future__ import annotations

from collections.abc import Mapping

from capsem_core.sample.encoding import jdump
from capsem_core.sample.events.recorder import Ctx, Recorder
from capsem_core.sample.pools import ALLOWED_DOMAINS, DENIED_DOMAINS
from capsem_core.sample.providers import PROVIDERS

# (rule id, action, detection level, what it matches) -- the policy a sample session runs under.
RULES: dict[str, tuple[str, str, dict[str, object]]] = {
    "net.allow.ai-providers": ("allow", "none", {"domain": [p.domain for p in PROVIDERS.values()]}),
    "net.allow.dev-registries": ("allow", "none", {"domain": list(ALLOWED_DOMAINS)}),
    "net.block.telemetry": ("block", "low", {"domain": list(DENIED_DOMAINS[:3])}),
    "net.ask.paste-sites": ("ask", "medium", {"domain": ["pastebin.com"]}),
    "dns.allow.default": ("allow", "none", {"qname": "*"}),
    "dns.block.telemetry": ("block", "low", {"qname": list(DENIED_DOMAINS[:3])}),
    "mcp.allow.github-read": ("allow", "informational",
                              {"server": "github", "tool": ["search_issues", "get_file_contents"]}),
    "mcp.log.protocol": ("allow", "informational", {"method": ["initialize", "tools/list"]}),
    "mcp.allow.capsem-builtin": ("allow", "none", {"server": "capsem"}),
    "model.allow.agents": ("allow", "none", {"provider": list(PROVIDERS)}),
    "cred.rewrite.api-keys": ("rewrite", "informational", {"header": [p.key_header for p in PROVIDERS.values()]}),
    "process.ask.git-push": ("ask", "medium", {"argv_prefix": ["git", "push"]}),
    "process.log.package-install": ("allow", "low", {"exe": ["pip", "npm"]}),
    "exec.allow.workspace": ("allow", "none", {"cwd": "/workspace/**"}),
    "file.flag.dotfiles": ("allow", "low", {"path": ["**/.env", "**/.git/config"]}),
}
RULE_JSON: dict[str, str] = {
    rid: jdump({"id": rid, "action": a, "detection_level": lvl, "match": m, "source": "profile:default"})
    for rid, (a, lvl, m) in RULES.items()
}


class Security:
    """Writes the security ledger of the events other collaborators record."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def payload(self, ctx: Ctx, event_id: str, event_type: str, fields: Mapping[str, object]) -> bytes:
        head = {"event_id": event_id, "event_type": event_type, "timestamp_unix_ms": self.rec.ms(),
                "trace_id": ctx.trace_id}
        if not self.rec.p.tiny:
            head["turn_id"] = ctx.turn_id
            head["session_network"] = self.rec.network_id
        head.update(fields)
        return jdump(head).encode()

    def secure(self, ctx: Ctx, event_id: str, event_type: str, payload: bytes, rule_id: str | None,
               *, stages: int = 2, cred: str | None = None, ask_approved: bool = True) -> str:
        """Rule match (if a rule matched) and the decision chain for one event. The rule and
        the first decision archive the same payload bytes, as Capsem's do."""
        if self.rec.p.tiny:
            stages = 1  # the small mix keeps one decision per event: bodies, not rows
        action = RULES[rule_id][0] if rule_id else "allow"
        effective = {"allow": "allow", "block": "block", "ask": "ask", "rewrite": "allow"}.get(action, "allow")
        ms = self.rec.ms()
        if rule_id is not None:
            self.rec.insert("security_rule_events", {
                "timestamp_unix_ms": ms, "event_id": event_id, "event_type": event_type, "rule_id": rule_id,
                "rule_action": action, "detection_level": RULES[rule_id][1], "rule_json": RULE_JSON[rule_id],
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.rec.body("payload", payload, "security.rule", "application/json")])
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
            self.rec.insert("security_decision_events", {
                "timestamp_unix_ms": ms + i, "event_id": event_id, "event_type": event_type, "stage": stage,
                "actor": actor, "rule_id": rid, "plugin_id": plugin, "previous_decision": previous,
                "requested_decision": requested, "effective_decision": final, "reason": reason,
                "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
            }, [self.rec.body("payload", payload, "security.decision", "application/json")] if i == 0 else ())
            previous = final
        if effective != "ask":
            return effective
        ask_id = self.rec.eid()
        base = {"ask_id": ask_id, "event_id": event_id, "event_type": event_type, "rule_id": rule_id,
                "rule_name": rule_id.split(".", 1)[-1].replace("-", " ") if rule_id else "ask",
                "rule_json": RULE_JSON[rule_id] if rule_id else "{}", "trace_id": ctx.trace_id,
                "turn_id": ctx.turn_id}
        self.rec.insert("security_ask_events", {**base, "timestamp_unix_ms": ms + 5, "status": "pending",
                                            "resolver": None, "reason": None},
                    [self.rec.body("payload", payload, "security.ask", "application/json")])
        self.rec.tick(2.0, 40.0)
        status = "approved" if ask_approved else "denied"
        self.rec.insert("security_ask_events", {**base, "timestamp_unix_ms": self.rec.ms(), "status": status,
                                            "resolver": "user", "reason": f"{status} in the session tray"})
        resolved = "allow" if ask_approved else "block"
        self.rec.insert("security_decision_events", {
            "timestamp_unix_ms": self.rec.ms(), "event_id": event_id, "event_type": event_type,
            "stage": "ask_resolution", "actor": "user", "rule_id": rule_id, "plugin_id": None,
            "previous_decision": "ask", "requested_decision": resolved, "effective_decision": resolved,
            "reason": f"ask {ask_id} {status}", "trace_id": ctx.trace_id, "turn_id": ctx.turn_id,
            "credential_ref": cred})
        return resolved
