"""Network rows of a sample session: DNS lookups, connections and their transport events,
HTTP exchanges with their request and response bodies, downloads, and refused telemetry.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from capsem_core._native._blake3 import hexdigest as b3hex
from capsem_core.sample.encoding import cap_bytes_text, jdump, textual
from capsem_core.sample.events.recorder import Ctx, Recorder
from capsem_core.sample.events.security import Security
from capsem_core.sample.pools import DENIED_DOMAINS


class Network:
    """The session's network: which names were resolved lately and which connections are open."""

    def __init__(self, rec: Recorder, security: Security) -> None:
        self.rec = rec
        self.security = security
        self.dns_seen: dict[str, float] = {}
        self.open_connections: list[tuple[str, str]] = []

    def transport(self, kind: str, connection_id: str | None, fields: Mapping[str, object]) -> None:
        self.rec.insert("transport_events", {
            "event_id": self.rec.eid(), "timestamp_unix_ms": self.rec.ms(), "event_type": kind,
            "network_id": self.rec.network_id, "connection_id": connection_id,
            "event_json": jdump({"kind": kind, "network_id": self.rec.network_id, "connection_id": connection_id,
                                  **fields}),
        })

    def resolve(self, ctx: Ctx, domain: str, process: str) -> None:
        """A DNS lookup (and a new connection) unless the name was resolved recently."""
        last = self.dns_seen.get(domain)
        if last is not None and self.rec.now - last < 300.0:
            return
        self.dns_seen[domain] = self.rec.now
        denied = domain in DENIED_DOMAINS[:3]
        h = b3hex(domain.encode())
        ip = f"{104 + int(h[0:2], 16) % 80}.{int(h[2:4], 16)}.{int(h[4:6], 16)}.{1 + int(h[6:8], 16) % 250}"
        eid = self.rec.eid()
        rule = "dns.block.telemetry" if denied else "dns.allow.default"
        took = self.rec.r.randint(1, 40)
        self.rec.insert("dns_events", {
            "event_id": eid, "timestamp": self.rec.ts(), "qname": domain, "qtype": 1, "qclass": 1,
            "rcode": 5 if denied else 0, "answer_ip": None if denied else ip,
            "decision": "denied" if denied else "allowed", "matched_rule": rule, "source_proto": "udp",
            "process_name": process, "upstream_resolver_ms": 0 if denied else took,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "policy_mode": "enforce",
            "policy_action": "block" if denied else "allow", "policy_rule": rule,
            "policy_reason": "telemetry endpoint" if denied else "default resolver policy",
            "credential_ref": None,
        })
        pl = self.security.payload(ctx, eid, "dns.query", {"qname": domain, "qtype": "A", "process": process})
        self.security.secure(ctx, eid, "dns.query", pl, rule if denied else None, stages=1)
        self.rec.now += took / 1000.0
        if not denied:
            conn = "conn-" + self.rec.hexid(10)
            self.transport("network.connect", conn, {"domain": domain, "ip": ip, "port": 443, "proto": "tcp"})
            self.rec.tick(0.005, 0.08)
            self.transport("network.connect_result", conn, {"ok": True, "tls": "TLSv1.3"})
            self.open_connections.append((conn, domain))

    def close_connections(self) -> None:
        for conn, domain in self.open_connections:
            self.transport("network.close", conn, {"domain": domain, "reason": "idle"})
        self.open_connections.clear()

    def net(self, ctx: Ctx, process: str, pid: int, domain: str, method: str, path: str,
            query: str | None, status: int, req: bytes | None, resp: bytes | None, req_ct: str | None,
            resp_ct: str | None, duration_ms: int, *, rule: str, decision: str = "allowed",
            cred: str | None = None, headers: Mapping[str, str] | None = None, stages: int = 2,
            ask_approved: bool = True) -> str:
        self.resolve(ctx, domain, process)
        eid = self.rec.eid()
        req_h = {"host": domain, "user-agent": process, "accept": "*/*"}
        if req_ct:
            req_h["content-type"] = req_ct
        if headers:
            req_h.update(headers)
        resp_h = {"content-type": resp_ct or "text/plain", "date": time.strftime(
            "%a, %d %b %Y %H:%M:%S GMT", time.gmtime(self.rec.now))}
        denied = decision != "allowed"
        self.rec.insert("net_events", {
            "event_id": eid, "timestamp": self.rec.ts(), "domain": domain, "port": 443, "decision": decision,
            "process_name": process, "pid": pid, "method": method, "path": path, "query": query,
            "status_code": status, "bytes_sent": len(req or b""), "bytes_received": len(resp or b""),
            "duration_ms": duration_ms, "matched_rule": rule, "request_headers": jdump(req_h),
            "response_headers": jdump(resp_h), "headers_truncated": 0,
            "request_body_preview": cap_bytes_text(req) if req and textual(req_ct) else None,
            "response_body_preview": cap_bytes_text(resp) if resp and textual(resp_ct) else None,
            "conn_type": "https",
            "policy_mode": "enforce", "policy_action": "block" if denied else "allow", "policy_rule": rule,
            "policy_reason": "domain is not on the allowlist" if denied else "domain on the allowlist",
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": cred,
        }, [self.rec.body("request", req, "http.request", req_ct), self.rec.body("response", resp, "http.request", resp_ct)])
        fields: dict[str, object] = {"process": process, "method": method, "domain": domain, "path": path}
        if not self.rec.p.tiny:
            fields.update({"pid": pid, "port": 443, "query": query, "headers": req_h,
                           "body_preview": cap_bytes_text(req, 1024) if req and textual(req_ct) else None})
        self.security.secure(ctx, eid, "http.request", self.security.payload(ctx, eid, "http.request", fields), rule,
                    stages=stages, cred=cred, ask_approved=ask_approved)
        return eid

    def download(self, ctx: Ctx, process: str, pid: int, domain: str, path: str, nbytes: int) -> None:
        """A package or pack download: compressed archive bytes, which do not compress again."""
        body = self.rec.r.randbytes(nbytes)
        took = int(nbytes / self.rec.r.uniform(5e6, 40e6) * 1000) + self.rec.r.randint(20, 200)
        self.rec.now += took / 1000.0
        self.net(ctx, process, pid, domain, "GET", path, None, 200, None, body, None,
                 "application/octet-stream", took, rule="net.allow.dev-registries")

    def telemetry(self, ctx: Ctx, process: str, pid: int) -> None:
        """An agent's telemetry beacon, refused by policy."""
        domain = self.rec.r.choice(DENIED_DOMAINS[:3])
        req = jdump({"event": "tengu_api_success", "session": self.rec.user_id[-16:], "ts": self.rec.ms(),
                      "props": {"model": ctx.prov.model if ctx.prov else None,
                                "durationMs": self.rec.r.randint(300, 9000)}}).encode()
        self.net(ctx, process, pid, domain, "POST", "/api/1/envelope/", None, 403, req,
                 b'{"error":"blocked by capsem network policy"}', "application/json", "application/json",
                 self.rec.r.randint(1, 5), rule="net.block.telemetry", decision="denied", stages=1)
