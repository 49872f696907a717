"""A ``ToolCaller`` that refuses any tool outside an allow-set before dispatch.

For callers that run tools without the sandbox bridge (activities, the CLI in an automatic context):
the allow-set, never the prompt's tool list, is what decides whether a call may happen.
"""

from __future__ import annotations

from typing import Any

from bamboo.tools.model import ToolCaller, ToolResult, ToolSpec


class AllowSetToolCaller:
    def __init__(self, inner: ToolCaller, allowed: frozenset[str], phase: str = "this phase") -> None:
        self.inner = inner
        self.allowed = allowed
        self.phase = phase

    def list_tools(self) -> list[ToolSpec]:
        return [s for s in self.inner.list_tools() if s.name in self.allowed]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name not in self.allowed:
            return ToolResult.failure(f"tool {name!r} is not allowed in {self.phase}; it was refused before dispatch")
        return await self.inner.call_tool(name, arguments)
