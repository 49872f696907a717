"""Issue 28, item 6: a tool result is made plain JSON before the inbound scrubber sees it, whatever the tool
returned. Bytes and arbitrary objects used to pass the scrubber untouched and be stringified after it, so an
AWS key, a GitHub token and a canary reached the script verbatim."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from bamboo.audit import MemoryAuditSink
from bamboo.sandbox.bridge import ToolBridge
from bamboo.tools.model import ToolResult
from tests.sandbox.conftest import AWS_KEY, GITHUB_TOKEN, SPECS, MemoryToolCaller

CANARY = "canary-" + os.urandom(12).hex()


class Opaque:
    """An object a careless tool returns as it is (a client's response object, say)."""

    def __str__(self) -> str:
        return f"Response(headers={{'Authorization': 'token {GITHUB_TOKEN}'}}, GITHUB_TOKEN={GITHUB_TOKEN})"


def leaky_result(shape: str) -> Any:
    """``values``: bytes and objects as values (they reached the script verbatim); ``keys``: a bytes key too
    (the reply could not be encoded at all and the script waited for it until its deadline)."""
    canary = f"BAMBOO_LLM_API_KEY={CANARY}".encode()
    return {
        "raw": f"export AWS_ACCESS_KEY_ID={AWS_KEY}\n".encode(),
        "object": Opaque(),
        "nested": ({b"BAMBOO_LLM_API_KEY": canary} if shape == "keys" else canary,),
        "bytes_list": [bytearray(f"GITHUB_TOKEN={GITHUB_TOKEN}".encode())],
    }


class LeakyCaller(MemoryToolCaller):
    def __init__(self, shape: str) -> None:
        super().__init__()
        self.shape = shape

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name == "leak_secret":
            self.calls.append((name, arguments))
            return ToolResult.success(leaky_result(self.shape))
        return await super().call_tool(name, arguments)


SEE = f"""
data = await tools.leak_secret()
seen = repr(data)
return {{"aws": {AWS_KEY!r} in seen, "github": {GITHUB_TOKEN!r} in seen, "canary": {CANARY!r} in seen,
        "types": sorted({{type(v).__name__ for v in data.values()}})}}
"""


@pytest.mark.parametrize("shape", ["values", "keys"])
async def test_non_json_results_are_scrubbed_before_the_script_sees_them(sandbox, shape):
    sandbox.executor.caller = LeakyCaller(shape)
    res = await sandbox.run(SEE, allowed={"leak_secret"})
    assert res.status == "ok", res.error
    assert res.return_value["aws"] is False, res.return_value
    assert res.return_value["github"] is False, res.return_value
    assert res.return_value["canary"] is False, res.return_value
    assert res.return_value["types"] == ["list", "str"]
    assert res.calls[0].redactions >= 3


@pytest.mark.parametrize("shape", ["values", "keys"])
async def test_the_bridge_hands_on_plain_scrubbed_json(shape):
    caller = LeakyCaller(shape)
    bridge = ToolBridge(run_id="r", caller=caller, specs=SPECS, allowed=frozenset({"leak_secret"}),
                        audit=MemoryAuditSink())
    reply = await bridge.handle_call({"type": "call", "token": bridge.token, "id": 1, "tool": "leak_secret", "args": {}})
    assert reply["ok"], reply
    data = reply["data"]
    assert json.loads(json.dumps(data, allow_nan=False)) == data  # only JSON types left
    text = json.dumps(data)
    assert AWS_KEY not in text and GITHUB_TOKEN not in text and CANARY not in text
    assert "REDACTED" in text
