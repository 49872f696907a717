"""Issue 28, item 5: every frame's audit row is written before the frame is answered or dropped.

Frames a teardown cuts off (a call followed at once by a forged frame, the frames before the one past the budget,
calls still in flight when the script returns) used to be cancelled before their row was written, and the
``done`` frame had none; a run whose audit write fails now stops and says so.
"""

from __future__ import annotations

import asyncio

from bamboo.audit import AuditEvent, MemoryAuditSink
from bamboo.sandbox.models import BridgeLimits

RAW = """
import json, os, socket, struct, sys, time
bridge = tools._bridge_call.__self__
sock = socket.socket(fileno=os.dup(bridge._sock.fileno()))
sock.setblocking(True)
def frame(body):
    raw = json.dumps(body).encode()
    return struct.pack(">I", len(raw)) + raw
def call(call_id, token=None):
    return frame({"type": "call", "token": token or bridge._token, "id": call_id, "tool": "get_task",
                  "args": {"task_id": call_id}})
"""


class SlowAudit(MemoryAuditSink):
    """An audit store that takes its time (a remote database under load)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def append(self, event: AuditEvent) -> None:
        await asyncio.sleep(self.delay)
        await super().append(event)


class FailingAudit(MemoryAuditSink):
    async def append(self, event: AuditEvent) -> None:
        raise ConnectionError("the audit store is down")


def use_audit(sandbox, audit: MemoryAuditSink) -> None:
    sandbox.audit = audit
    sandbox.executor.audit = audit


async def test_a_call_followed_at_once_by_a_forged_frame_is_audited(sandbox):
    code = RAW + """
sock.sendall(call(1) + call(2, token="f" * 64))
time.sleep(3)
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error" and "wrong token" in res.error
    rows = sandbox.audit_bodies()
    assert len(rows) == 2, rows
    assert [r["reason"] for r in rows].count("bad_token") == 1 and {r["tool"] for r in rows} == {"get_task"}
    assert res.calls_total == 2


async def test_every_frame_up_to_the_one_past_the_budget_is_audited(sandbox):
    code = RAW + """
sock.sendall(b"".join(call(i) for i in range(1, 52)))
time.sleep(3)
"""
    res = await sandbox.run(code, timeout_s=10, bridge_limits=BridgeLimits(max_calls=50))
    assert res.status == "call_limit", (res.status, res.error)
    rows = sandbox.audit_bodies()
    assert len(rows) == 51, len(rows)
    assert [r["reason"] for r in rows].count("max_calls") == 1
    assert len(sandbox.caller.calls) <= 50


async def test_the_done_frame_is_audited(sandbox):
    res = await sandbox.run("return {'answer': 42}")
    assert res.status == "ok", res.error
    frames = [e for e in sandbox.audit.events if e.kind == "sandbox_frame"]
    assert len(frames) == 1, sandbox.audit.events
    assert frames[0].body["frame"] == "done" and frames[0].body["outcome"] == "accepted"


async def test_calls_in_flight_at_the_end_are_audited_even_with_a_slow_audit_store(sandbox, mode):
    """The script fires calls without awaiting them and returns: the teardown cuts them off. Every call a tool
    served has its row, however long the store takes, in each of three runs."""
    use_audit(sandbox, SlowAudit(0.5))
    tool = "kill_task" if mode == "bwrap" else "get_task"  # degraded refuses state-changing tools
    code = f"""
import asyncio
calls = [asyncio.ensure_future(tools.{tool}(task_id=i)) for i in range(1, 4)]
await asyncio.sleep(0.05)
return {{"fired": len(calls)}}
"""
    for _ in range(3):
        before = len(sandbox.audit_bodies())
        served = len(sandbox.caller.calls)
        res = await sandbox.run(code, allowed={"get_task", tool}, timeout_s=10)
        assert res.status == "ok", res.error
        rows = sandbox.audit_bodies()[before:]
        assert len(rows) == res.calls_total == 3, rows
        dispatched = len(sandbox.caller.calls) - served
        assert sum(1 for r in rows if r["outcome"] in ("allowed", "error")) >= dispatched


async def test_a_run_whose_audit_write_fails_stops_and_says_so(sandbox):
    use_audit(sandbox, FailingAudit())
    code = """
try:
    await tools.get_task(task_id=1)
    first = "served"
except ToolError as exc:
    first = str(exc)
return {"went_on": True, "first": first}
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error", (res.status, res.return_value)
    assert res.return_value is None
    assert "audit" in res.error
