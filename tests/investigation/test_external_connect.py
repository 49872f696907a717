"""External MCP servers connect once, when the worker starts, and every early reader waits for them.

Issue 27: right after a worker started, the first analysis planned its exploration without the external
tools. The tool caller set "connected" before the connection finished, so a second reader (an analysis
while a session's first turn was connecting) read a catalogue without them; and nothing connected until
the first reader asked.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.investigation.procedure_tools import ProcedureToolCaller
from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec
from bamboo.contract import Queue
from worker.registry import QueuePlan


class SlowExternalServers:
    """A composite whose external server answers its connection after a while, then offers one tool."""

    def __init__(self) -> None:
        self.connections = 0
        self.connected = False

    async def connect(self) -> list[Any]:
        self.connections += 1
        await asyncio.sleep(0.2)
        self.connected = True
        return []

    def list_tools(self) -> list[ToolSpec]:
        builtin = [ToolSpec(name="get_task", read_only=True)]
        external = [ToolSpec(name="site_status", read_only=True, origin=ToolOrigin.EXTERNAL, server="sites")]
        return builtin + (external if self.connected else [])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.failure("not called here")


class NoProcedures:
    async def approved_code(self) -> dict[str, str]:
        return {}


def caller(base: SlowExternalServers) -> ProcedureToolCaller:
    return ProcedureToolCaller(base, NoProcedures(), None, MemoryAuditSink(), MemoryBlobSink())  # type: ignore[arg-type]


async def test_readers_that_arrive_while_the_servers_connect_wait_and_see_the_external_tools():
    base = SlowExternalServers()
    tools = caller(base)

    async def catalogue() -> list[str]:
        await tools.refresh()
        return [t.name for t in tools.raw_tools()]

    first, second = await asyncio.gather(catalogue(), catalogue())
    assert "site_status" in first and "site_status" in second
    assert base.connections == 1


async def test_the_worker_connects_its_tool_caller_when_it_starts(services):
    """The worker's plan hands the worker the tool caller's connection to start with it (run_worker starts
    every plan's on_start hook before it polls); started that way, the servers connect with no reader."""
    from worker.registry import plan

    hooks = [hook for p in plan(services, 4) for hook in p.on_start]
    assert [type(getattr(h, "__self__", None)) for h in hooks] == [ProcedureToolCaller]
    assert [getattr(h, "__name__", "") for h in hooks] == ["connect"]

    base = SlowExternalServers()
    tools = caller(base)
    started = asyncio.ensure_future(QueuePlan(Queue.LLM, on_start=[tools.connect]).on_start[0]())
    await asyncio.sleep(0.3)
    assert base.connected and base.connections == 1, "connected at start, with no reader"
    await tools.refresh()
    assert base.connections == 1 and "site_status" in [t.name for t in tools.raw_tools()]
    await started
