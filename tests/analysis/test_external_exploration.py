"""The automatic explorer sees the worker's live catalogue: an external MCP tool the operator marked
read-only may be used by exploration code (a real MCP server, mcp-server-time), an unmarked one is refused,
and the built-in catalogue alone would have refused both."""

from __future__ import annotations

import json

import pytest

from bamboo.analysis.exploration import builtin_tool_catalogue, plan_read_only_code
from bamboo.mcp.config import McpServerConfig
from bamboo.mcp.external import StdioMcpClient
from tests.mcp.conftest import TIME_SERVER


class _Model:
    """Answers the exploration schema with code calling one tool; records the tools it was shown."""

    def __init__(self, call: str) -> None:
        self.call = call
        self.shown: list[str] = []

    async def structured(self, *, user: str, output, **_: object):
        self.shown = [t["name"] for t in json.loads(user)["tools"]]
        return output(code=f"return await tools.{self.call}", capability_gaps=[])


@pytest.fixture
async def external_specs():
    client = StdioMcpClient(McpServerConfig(name="time", command=TIME_SERVER, call_timeout_s=10,
                                            read_only_tools=["get_current_time"]))
    await client.connect()
    try:
        yield builtin_tool_catalogue()[0] + client.list_tools()
    finally:
        await client.close()


async def test_an_operator_marked_read_only_external_tool_reaches_the_explorer(external_specs):
    model = _Model("get_current_time(timezone='UTC')")
    plan = await plan_read_only_code(model, task_id=1, status="failed", open_questions=["when?"],
                                     specs=external_specs)
    assert "get_current_time" in model.shown and "convert_time" not in model.shown
    assert plan.status == "run" and plan.tools == ["get_current_time"] and "get_current_time" in plan.allowed_tools
    assert "convert_time" not in plan.allowed_tools


async def test_an_unmarked_external_tool_stays_out_of_the_automatic_allow_set(external_specs):
    plan = await plan_read_only_code(_Model("convert_time(source_timezone='UTC', time='10:00', "
                                            "target_timezone='CET')"),
                                     task_id=1, status="failed", open_questions=["when?"], specs=external_specs)
    assert plan.status == "refused"


async def test_the_builtin_catalogue_alone_does_not_know_the_external_tool():
    plan = await plan_read_only_code(_Model("get_current_time(timezone='UTC')"), task_id=1, status="failed",
                                     open_questions=["when?"])
    assert plan.status == "refused"
