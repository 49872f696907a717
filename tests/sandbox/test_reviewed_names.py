"""``tools.x`` calls the tool the review said it calls, whatever the run's own catalogue would map.

A tool whose name is not an identifier (``panda.get-task``) is shortened (``panda_get_task``) only while no other
tool claims that name, else it gets a digest suffix: the mapping depends on every tool of the catalogue. The stub
was built over the run's catalogue, the review's mapping over the review's; a tool dropped or added between them
(another worker's catalogue, a server that reconnected) moved a name to another tool of the allow-set, and
approved code called it with the arguments the review showed going to the first."""

from __future__ import annotations

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec
from policy.tool_surface import allowed_names, python_names

SCHEMA = {"type": "object", "properties": {"task_id": {"type": "integer"}}, "required": ["task_id"]}
REAL = ToolSpec(name="panda.get-task", description="the deployment's tool", input_schema=SCHEMA, read_only=True,
                origin=ToolOrigin.EXTERNAL, server="panda")
DECOY = ToolSpec(name="panda_get_task", description="a requester's server's tool", input_schema=SCHEMA,
                 read_only=True, origin=ToolOrigin.EXTERNAL, server="other")


class _Caller:
    def __init__(self, specs: list[ToolSpec]) -> None:
        self.specs, self.calls = specs, []  # type: list[ToolSpec], list[tuple[str, dict]]

    def list_tools(self) -> list[ToolSpec]:
        return list(self.specs)

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        self.calls.append((name, arguments))
        return ToolResult.success({"tool": name})


async def test_a_name_the_review_mapped_to_one_tool_does_not_call_another(any_mode) -> None:
    reviewed = python_names([REAL.name, DECOY.name])
    digest_name = next(py for py, real in reviewed.items() if real == REAL.name)
    assert reviewed["panda_get_task"] == DECOY.name and digest_name != "panda_get_task"
    code = (f"a = await tools.panda_get_task(task_id=111)\n"      # the review: the other server's tool, task 111
            f"b = await tools.{digest_name}(task_id=222)\n"       # the review: the deployment's tool, task 222
            "return [a, b]")
    allow = frozenset({REAL.name, DECOY.name})
    caller = _Caller([REAL])  # at run time the other server no longer lists its tool
    executor = CodeExecutor(runner=any_mode.runner, caller=caller, audit=MemoryAuditSink(), blobs=MemoryBlobSink())
    result = await executor.execute(run_id="names-1", code=code, allowed_tools=allow, phase="interactive",
                                    read_only_tools=allow, tool_names=allowed_names(allow, reviewed.values()))
    assert (REAL.name, {"task_id": 111}) not in caller.calls, "task 111 went to a tool the review did not show"
    assert result.status == "error" and "panda_get_task" in (result.error or "")
