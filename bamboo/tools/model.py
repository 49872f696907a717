"""The tool shape every layer agrees on: MCP clients, the sandbox bridge, the trust policy.

A tool that nobody declared read-only is treated as state-changing: the safe default keeps the
automatic phases from calling something whose effect nobody vouched for.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ToolOrigin(str, Enum):
    BUILTIN = "builtin"
    EXTERNAL = "external"
    PROCEDURE = "procedure"
    COMMAND = "command"


class ToolSpec(BaseModel):
    """What a caller may know about a tool before calling it."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    external_access: bool = False
    requires_interaction: bool = False
    origin: ToolOrigin = ToolOrigin.BUILTIN
    server: str | None = None


class ToolResult(BaseModel):
    """A tool's answer. ``ok`` with ``no_data`` means "looked, found nothing"; ``ok=False`` means it failed."""

    ok: bool
    data: Any = None
    error: str | None = None
    no_data: bool = False

    @classmethod
    def success(cls, data: Any) -> "ToolResult":
        empty = data is None or (hasattr(data, "__len__") and len(data) == 0)
        return cls(ok=True, data=data, no_data=empty)

    @classmethod
    def failure(cls, error: str) -> "ToolResult":
        return cls(ok=False, error=error)


class ToolCaller(Protocol):
    """Anything that can list and call tools (a built-in client, an MCP server, a composite)."""

    def list_tools(self) -> list[ToolSpec]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...
