"""Item: output nothing downstream can carry is the script's error, reported once — never an exception
that would make Temporal re-run an unattended script."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from bamboo.sandbox.contract import ExecuteCodeInput
from activities.sandbox import SandboxActivities
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from tests.sandbox.conftest import MemoryToolCaller, harness

FORGED_DONE = """
import os, socket, struct, sys, time
bridge = tools._bridge_call.__self__
sock = socket.socket(fileno=os.dup(bridge._sock.fileno()))
sock.setblocking(True)
body = b'{"type":"done","ok":true,"token":"' + bridge._token.encode() + b'","value":{"x":' + b"[" * 100000 + b"}}"
sock.sendall(struct.pack(">I", len(body)) + body)
time.sleep(3)
"""

CASES = {
    "lone surrogate": ("return {'text': '\\ud800'}", "not valid Unicode"),
    "nested 700 deep": ("v = []\nfor _ in range(700):\n    v = [v]\nreturn {'v': v}", "nested more than"),
    "100k brackets": (FORGED_DONE, "nested too deeply"),
    "not finite": ("return {'x': float('nan')}", "JSON"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_unreportable_return_values_are_script_errors(mode, case):
    code, expected = CASES[case]
    async with harness(mode) as h:
        res = await h.run(code, timeout_s=10)
    assert res.status == "error" and expected in res.error, (res.status, res.error)
    pydantic_data_converter.payload_converter.to_payloads([res])  # what the worker's converter does with the report


@pytest.mark.parametrize("case", list(CASES))
async def test_the_activity_returns_a_report_instead_of_raising(mode, case):
    code, expected = CASES[case]
    async with harness(mode) as h:
        acts = SandboxActivities(runner=h.runner, caller=MemoryToolCaller(), audit=MemoryAuditSink(), blobs=MemoryBlobSink())
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=5))
        out = await env.run(acts.execute_code, ExecuteCodeInput(run_id=f"bad-{case}", code=code, phase="interactive"))
    assert out.status == "error" and expected in out.error
    pydantic_data_converter.payload_converter.to_payloads([out])
