"""Selection trims the prompt only: the allow-set is computed from the whole catalogue by the policy, and the
sandbox bridge (the one gate a run's tool calls cross) enforces it whatever the prompt showed."""

from __future__ import annotations

import httpx

from bamboo.audit import MemoryAuditSink
from bamboo.mcp.composite import CompositeToolCaller
from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.toolbox import PandaToolbox
from bamboo.sandbox.bridge import ToolBridge
from bamboo.tools.model import ToolResult, ToolSpec
from bamboo.tools.selection import SelectionConfig, ToolSelector
from bamboo.tools.vector_index import MemoryVectorIndex
from policy.catalog import ToolCatalog, ToolFacts
from policy.phases import automatic_allow_set, interactive_allow_set
from tests.panda.incidents import MEMORY_TASK

from .support import HashingEmbedder, StaticToolCaller, filler_specs

PROMPT = "Investigate the task.\n{tools}\nAnswer with code."


def catalog_of(caller: CompositeToolCaller) -> ToolCatalog:
    return ToolCatalog.build(ToolFacts.from_spec(s) for s in caller.list_tools())


class Gate:
    """One run's bridge over the whole catalogue with the phase's allow-set, called as the child would."""

    def __init__(self, caller: CompositeToolCaller, catalogue: list[ToolSpec], allowed: frozenset[str]) -> None:
        self.bridge = ToolBridge(run_id="run-allow", caller=caller, specs=catalogue, allowed=allowed,
                                 audit=MemoryAuditSink())
        self._next_id = 0

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        self._next_id += 1
        reply = await self.bridge.handle_call({"type": "call", "token": self.bridge.token, "id": self._next_id,
                                               "tool": name, "args": arguments})
        return ToolResult(ok=True, data=reply["data"]) if reply["ok"] else ToolResult.failure(reply["error"])


async def test_omitted_tool_stays_callable_and_automatic_phase_refuses_state_changes(
    tools_simulator: PandaSimulator,
) -> None:
    filler = StaticToolCaller(filler_specs(400))
    async with PandaClient(tools_simulator.api_url, tools_simulator.monitor_url) as client:
        composite = CompositeToolCaller([PandaToolbox(client), filler])
        catalogue = composite.list_tools()
        interactive_before = interactive_allow_set(catalog_of(composite))
        automatic_before = automatic_allow_set(catalog_of(composite))

        selector = ToolSelector(MemoryVectorIndex(), HashingEmbedder(), "ns-allow",
                                SelectionConfig(max_full_schemas=5, context_window=1500, budget_margin=200))
        block = await selector.select(PROMPT, "scout jobs ran out of memory", catalogue)
        assert "get_task_details" in block.omitted and "kill_task" in block.omitted

        assert interactive_allow_set(catalog_of(composite)) == interactive_before
        assert automatic_allow_set(catalog_of(composite)) == automatic_before
        assert automatic_before == frozenset(s.name for s in catalogue if s.read_only)

        interactive = Gate(composite, catalogue, interactive_before)
        details = await interactive.call_tool("get_task_details", {"task_id": MEMORY_TASK})
        assert details.ok and details.data["jediTaskID"] == MEMORY_TASK
        omitted_filler = next(n for n in block.omitted if n in {s.name for s in filler.specs})
        assert (await interactive.call_tool(omitted_filler, {"site": "X"})).ok

        automatic = Gate(composite, catalogue, automatic_before)
        assert (await automatic.call_tool("get_task_details", {"task_id": MEMORY_TASK})).ok
        refused = await automatic.call_tool("kill_task", {"task_id": MEMORY_TASK})
        assert not refused.ok and "'kill_task' is not allowed in this run" in refused.error
        state_changing_filler = next(s.name for s in filler.specs if not s.read_only)
        assert not (await automatic.call_tool(state_changing_filler, {"site": "X"})).ok
        assert state_changing_filler not in filler.called
    assert httpx.get(f"{tools_simulator.base_url}/sim/calls").json() == []
