"""Item: every bridge frame is audited (undecodable bytes quoted); a forged token closes the connection."""

from __future__ import annotations

import json

SEND_RAW = """
import json, os, socket, struct, sys, time
bridge = tools._bridge_call.__self__
sock = socket.socket(fileno=os.dup(bridge._sock.fileno()))
sock.setblocking(True)
def send_bytes(body):
    sock.sendall(struct.pack(">I", len(body)) + body)
"""


async def test_a_lone_surrogate_in_the_arguments_is_audited_and_denied(sandbox):
    code = """
try:
    await tools.get_task(task_id="\\ud800")
    first = "served"
except ToolDenied as exc:
    first = str(exc)
second = await tools.get_task(task_id=7)
return {"first": first, "second": second["task_id"]}
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "ok", res.error
    assert "not valid Unicode" in res.return_value["first"] and res.return_value["second"] == 7
    rows = sandbox.audit_bodies()
    assert [(r["outcome"], r["reason"]) for r in rows] == [("denied", "invalid_arguments"), ("allowed", None)]
    assert "\\ud800" in rows[0]["args_preview"]
    json.dumps(rows, ensure_ascii=False).encode("utf-8")  # storable as it stands
    assert sandbox.caller.dispatched("get_task") == 1


async def test_undecodable_bytes_are_audited_quoted_and_end_the_run(sandbox):
    code = SEND_RAW + """
send_bytes(b'{"type": "call", "tool": "get_task", "args": {"task_id": "\\xff\\xfe"}}')
time.sleep(3)
return {}
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error" and "not UTF-8" in res.error
    [row] = sandbox.audit_bodies()
    assert row["outcome"] == "denied" and row["reason"].startswith("malformed_frame")
    assert "\\xff\\xfe" in row["args_preview"]
    assert res.calls[0].tool == "<undecodable frame>"
    assert sandbox.caller.calls == []


async def test_a_forged_token_closes_the_connection_and_is_audited(sandbox):
    code = SEND_RAW + """
send_bytes(json.dumps({"type": "call", "token": "f" * 64, "id": 99, "tool": "get_task", "args": {"task_id": 1}}).encode())
time.sleep(3)
try:
    await tools.get_task(task_id=2)
    after = "served"
except ToolError as exc:
    after = str(exc)
return {"after": after}
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error" and "wrong token" in res.error
    assert res.return_value is None  # the script never got to carry on
    assert [r["reason"] for r in sandbox.audit_bodies()] == ["bad_token"]
    assert sandbox.caller.calls == []


async def test_a_done_frame_with_a_forged_token_is_audited(sandbox):
    code = SEND_RAW + """
send_bytes(json.dumps({"type": "done", "token": "0" * 64, "ok": True, "value": {"forged": True}}).encode())
time.sleep(3)
return {"honest": True}
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error" and res.return_value is None
    [row] = sandbox.audit_bodies()
    assert row["reason"].startswith("bad_token") and "forged" in row["args_preview"]


async def test_a_frame_of_an_unknown_type_is_audited(sandbox):
    code = SEND_RAW + """
send_bytes(json.dumps({"type": "exec", "token": bridge._token, "cmd": "kill_task"}).encode())
time.sleep(3)
"""
    res = await sandbox.run(code, timeout_s=10)
    assert res.status == "error"
    [row] = sandbox.audit_bodies()
    assert row["reason"].startswith("unexpected_frame")
