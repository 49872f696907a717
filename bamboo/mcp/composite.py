"""One ``ToolCaller`` over the built-in tools and every configured external server.

Built-ins come first and win name clashes, so an external server can never replace what
``kill_task`` or ``get_task_details`` mean; the losing tool is reported in ``shadowed`` (and logged),
never silently hidden.

A name stays with the server that first served it for the life of the process. Routed afresh at every call,
a name moved when its server dropped: the same server configured twice (read-only credentials first, write
credentials second) sent ``add``, reviewed and allowed as read-only, to the server that may change state, in
an unattended run. Now a name whose server is not answering is simply not callable until it answers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from bamboo.mcp.external import McpServerStatus, McpSessionClient
from bamboo.tools.model import ToolCaller, ToolResult, ToolSpec

log = logging.getLogger(__name__)


class ShadowedTool(BaseModel):
    name: str
    hidden_from: str
    kept_from: str


def _source(spec: ToolSpec) -> str:
    return spec.server or spec.origin.value


class CompositeToolCaller:
    def __init__(self, builtins: Sequence[ToolCaller], externals: Sequence[McpSessionClient] = ()) -> None:
        self.builtins = list(builtins)
        self.externals = list(externals)
        self.shadowed: list[ShadowedTool] = []
        self._owners: dict[str, tuple[int, str]] = {}  # tool name -> (its caller's place, its source), for good

    @property
    def statuses(self) -> list[McpServerStatus]:
        return [c.status for c in self.externals]

    async def connect(self) -> list[McpServerStatus]:
        """Connect every external server concurrently; failures are recorded, never raised."""
        await asyncio.gather(*(c.connect() for c in self.externals))
        self._resolve()
        for s in self.shadowed:
            log.warning("tool %s from %s is shadowed by %s and will not be callable", s.name, s.hidden_from, s.kept_from)
        return self.statuses

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.externals), return_exceptions=True)
        for b in self.builtins:
            closer = getattr(b, "aclose", None)
            if closer is not None:
                await closer()

    async def __aenter__(self) -> "CompositeToolCaller":
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _resolve(self) -> dict[str, tuple[ToolCaller, ToolSpec]]:
        routes: dict[str, tuple[ToolCaller, ToolSpec]] = {}
        shadowed: list[ShadowedTool] = []
        for place, caller in enumerate([*self.builtins, *self.externals]):
            for spec in caller.list_tools():
                owner, owner_source = self._owners.setdefault(spec.name, (place, _source(spec)))
                if owner != place or spec.name in routes:
                    kept = routes[spec.name][1] if spec.name in routes else None
                    shadowed.append(ShadowedTool(
                        name=spec.name, hidden_from=_source(spec),
                        kept_from=_source(kept) if kept is not None else f"{owner_source} (not answering)"))
                    continue
                routes[spec.name] = (caller, spec)
        self.shadowed = shadowed
        return routes

    def list_tools(self) -> list[ToolSpec]:
        return [spec for _, spec in self._resolve().values()]

    def spec(self, name: str) -> ToolSpec | None:
        route = self._resolve().get(name)
        return route[1] if route else None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        routes = self._resolve()
        route = routes.get(name)
        if route is None:
            return ToolResult.failure(f"unknown tool {name!r}; available: {', '.join(sorted(routes))}")
        return await route[0].call_tool(name, arguments)
