"""Process and file rows of a sample session: the audit trail of every process, file-monitor
events (with the overflow rows of a burst), and exec-API commands with their output.
"""

from __future__ import annotations

from collections.abc import Sequence

from capsem_core.sample.encoding import EXEC_OUTPUT_CAP, jdump
from capsem_core.sample.events.recorder import Ctx, Recorder
from capsem_core.sample.events.security import Security
from capsem_core.sample.pools import EXE, FS_TOP, IDENT_NOUNS, IDENT_VERBS
from capsem_core.writer import ledger_timestamp as ledger_time


class Processes:
    """The guest's processes and files, and the exec commands run in it."""

    def __init__(self, rec: Recorder, security: Security) -> None:
        self.rec = rec
        self.security = security
        self.exec_id = 0

    def audit(self, ctx: Ctx, exe: str, argv: Sequence[str], ppid: int, parent_exe: str | None,
              exec_event_id: int | None = None, exit_code: int | None = 0) -> tuple[int, str]:
        pid = self.rec.new_pid()
        eid = self.rec.eid()
        ms = self.rec.ms()
        self.rec.insert("audit_events", {
            "event_id": eid, "timestamp": self.rec.ts(), "pid": pid, "ppid": ppid, "uid": 1000, "exe": exe,
            "comm": exe.rsplit("/", 1)[-1][:15], "argv": jdump(list(argv)), "cwd": FS_TOP,
            "exit_code": exit_code, "session_id": self.rec.audit_session, "tty": None,
            "audit_id": f"{ms // 1000}.{ms % 1000:03d}:{self.rec.c.rows.get('audit_events', 0) + 1}",
            "exec_event_id": exec_event_id, "parent_exe": parent_exe, "trace_id": ctx.trace_id,
            "turn_id": ctx.turn_id, "credential_ref": None,
        })
        return pid, eid

    def fs(self, ctx: Ctx, action: str, path: str, size: int | None, kind: str = "file") -> None:
        directory, name = path.rsplit("/", 1)
        self.rec.insert("fs_events", {
            "event_id": self.rec.eid(), "timestamp": self.rec.ts(), "action": action, "path": path,
            "directory": directory or "/", "name": name, "size": size, "kind": kind,
            "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": None,
        })

    def fs_burst(self, ctx: Ctx, directory: str, n: int, action: str = "created") -> None:
        """A burst of changes seen by the file monitor; a scan emits at most one window of
        them and marks the rest with an overflow row (size = how many were deferred)."""
        window = self.rec.p.fs_window
        r = self.rec.r
        emitted = 0
        while emitted < n:
            batch = min(window, n - emitted)
            for i in range(emitted, emitted + batch):
                ext = ".py" if i % 3 else ".pyc"
                self.fs(ctx, action, f"{directory}/{IDENT_VERBS[i % len(IDENT_VERBS)]}_"
                        f"{IDENT_NOUNS[(i // 7) % len(IDENT_NOUNS)]}_{i}{ext}", r.randint(90, 40_000))
                self.rec.now += 0.0004
            emitted += batch
            if emitted < n:
                self.rec.insert("fs_events", {
                    "event_id": self.rec.eid(), "timestamp": self.rec.ts(), "action": "overflow", "path": "",
                    "directory": None, "name": None, "size": n - emitted, "kind": "other",
                    "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "credential_ref": None,
                })
                self.rec.tick(0.25, 1.0)  # the deferred changes arrive with the next scan

    def output(self, kind: str, nbytes: int) -> str:
        """Command output of about ``nbytes`` bytes (exactly, when it has to be cut)."""
        text = self.rec.pools.shell_lines(self.rec.r, kind, nbytes // 40 + 1)
        while len(text) < nbytes:
            text += "\n" + self.rec.pools.shell_lines(self.rec.r, kind, nbytes // 40 + 1)
        return text[:nbytes]

    def exec_cmd(self, ctx: Ctx, command: str, source: str, detail: str, process: str) -> tuple[str, int, int]:
        """An exec-API / built-in exec command, its output (cut to 1 KiB as the guest cuts it)
        archived beside the row. Returns (stored stdout, exit code, exec_events row id)."""
        r = self.rec.r
        self.exec_id += 1
        eid = self.rec.eid()
        started = self.rec.now
        if self.rec.p.tiny:
            out = self.output(detail, r.randint(100, 300))
            out_total = len(out.encode())
            err = self.output("build", r.randint(100, 300)) if r.random() < 0.3 else ""
            err_total = len(err.encode())
        else:
            out_total = self.rec.logu(40, 60_000)
            out = self.output(detail, min(out_total, EXEC_OUTPUT_CAP))
            err_total = self.rec.logu(30, 6000) if r.random() < 0.25 else 0
            err = self.output("build", min(err_total, EXEC_OUTPUT_CAP)) if err_total else ""
        exit_code = 1 if (detail == "pytest" and "FAILED" in out) else (2 if r.random() < 0.03 else 0)
        duration = int(self.rec.logu(15, 30_000) if not self.rec.p.tiny else r.randint(5, 400))
        self.rec.now += duration / 1000.0
        pid = self.rec.new_pid()
        self.rec.insert("exec_events", {
            "event_id": eid, "timestamp": ledger_time(started), "exec_id": self.exec_id, "command": command,
            "exit_code": exit_code, "duration_ms": duration, "stdout_preview": out or None,
            "stderr_preview": err or None, "stdout_bytes": out_total, "stderr_bytes": err_total,
            "source": source, "trace_id": ctx.trace_id, "turn_id": ctx.turn_id, "process_name": process,
            "pid": pid, "credential_ref": None,
        }, [self.rec.body("stdout", out.encode(), "process.exec_complete", "text/plain", out_total),
            self.rec.body("stderr", err.encode(), "process.exec_complete", "text/plain", err_total)])
        row_id = self.rec.c.rows["exec_events"]
        fields: dict[str, object] = {"command": command[:120], "source": source}
        if not self.rec.p.tiny:
            fields.update({"cwd": FS_TOP, "exit_code": exit_code, "pid": pid, "exec_id": self.exec_id})
        self.security.secure(ctx, eid, "process.exec", self.security.payload(ctx, eid, "process.exec", fields),
                    "exec.allow.workspace", stages=1)
        argv = command.split()
        self.audit(ctx, EXE.get(detail, "/usr/bin/bash"), argv, ctx.pid or 1, "/usr/libexec/capsem-agent",
                   exec_event_id=row_id, exit_code=exit_code)
        return out, exit_code, row_id
