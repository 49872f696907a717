"""Item: denied calls are bounded — they count against the budget, past it the run stops, the report is capped."""

from __future__ import annotations

import json

from bamboo.sandbox.models import BridgeLimits

DENIED_LOOP = """
n = 0
while True:
    try:
        await tools._bridge_call("kill_task", {"task_id": n})
    except ToolDenied:
        n += 1
"""


async def test_a_loop_of_denied_calls_is_stopped_at_the_budget(sandbox):
    res = await sandbox.run(DENIED_LOOP, timeout_s=20, bridge_limits=BridgeLimits(max_calls=50))
    assert res.status == "call_limit", (res.status, res.error)
    rows = sandbox.audit_bodies()
    assert 50 <= len(rows) <= 51, len(rows)  # the budget, plus the call that went past it
    assert {r["outcome"] for r in rows} == {"denied"}
    assert rows[-1]["reason"] == "max_calls"
    assert sandbox.caller.calls == []
    assert len(res.model_dump_json()) < 64 * 1024


async def test_replayed_and_forged_ids_count_too(sandbox):
    code = """
import json, os, socket, struct, sys
bridge = tools._bridge_call.__self__
s = socket.socket(fileno=os.dup(bridge._sock.fileno()))
s.setblocking(True)
for _ in range(10000):  # the same id over and over: each one is a frame the parent has to judge
    body = json.dumps({"type": "call", "token": bridge._token, "id": 1, "tool": "get_task", "args": {"task_id": 1}}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
import time
time.sleep(5)
"""
    res = await sandbox.run(code, timeout_s=15, bridge_limits=BridgeLimits(max_calls=20))
    assert res.status == "call_limit", (res.status, res.error)
    assert len(sandbox.audit_bodies()) <= 21
    assert sandbox.caller.dispatched("get_task") <= 1


async def test_a_long_call_log_is_cut_in_the_report_and_kept_whole_in_a_blob(sandbox):
    code = "for i in range(150):\n    await tools.get_task(task_id=i)\nreturn {'n': 150}"
    res = await sandbox.run(code, timeout_s=30, bridge_limits=BridgeLimits(max_calls=200))
    assert res.status == "ok", res.error
    assert res.calls_total == 150 and len(res.calls) == 100 and res.calls_ref
    parked = json.loads(await sandbox.blobs.get(res.calls_ref))
    assert len(parked) == 150 and parked[-1]["args_preview"] == '{"task_id":149}'


async def test_attacker_sized_text_cannot_swell_the_report(sandbox):
    """Reasons echo schema errors, which echo arguments; a forged done frame carries any error text."""
    code = """
import json, os, socket, struct, sys
try:
    await tools.get_task(task_id="A" * 500000)
except ToolDenied:
    pass
bridge = tools._bridge_call.__self__
s = socket.socket(fileno=os.dup(bridge._sock.fileno()))
s.setblocking(True)
body = json.dumps({"type": "done", "token": bridge._token, "ok": False, "error": "E" * 900000}).encode()
s.sendall(struct.pack(">I", len(body)) + body)
import time
time.sleep(3)
"""
    res = await sandbox.run(code, timeout_s=15)
    assert res.status == "error"
    assert len(res.model_dump_json()) < 64 * 1024
    assert len(json.dumps(sandbox.audit_bodies())) < 8 * 1024
