"""``PandaToolbox``: the built-in PanDA tools behind the ``ToolCaller`` protocol.

It is the only place where PanDA exceptions become ``ToolResult`` failures, so every caller (the
sandbox bridge, the CLI, the composite) sees the same three outcomes: data, no data, or a failure
that says what went wrong.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

from bamboo.metrics import METRICS
from bamboo.tools.arguments import ArgumentError, validate_arguments
from bamboo.panda.client import PandaClient
from bamboo.panda.errors import PandaConfigError, PandaError, PandaNotFound, PandaRefused, PandaUnavailable
from bamboo.panda.tools import BuiltinTool, builtin_tools
from bamboo.sandbox.protocol import scrubbed_reason
from bamboo.tools.model import ToolResult, ToolSpec

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("bamboo.panda")


class PandaToolbox:
    def __init__(self, client: PandaClient, tools: list[BuiltinTool] | None = None) -> None:
        self.client = client
        self._tools = {t.spec.name: t for t in (tools if tools is not None else builtin_tools())}

    def list_tools(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """One call, traced as ``panda.tool`` with its name and outcome (ok, no_data or error), and a failure's text
        scrubbed as an audit row's reason is: it may quote a URL, a session or a credential, and spans leave the
        worker (an OTLP collector, the console span file)."""
        with _tracer.start_as_current_span("panda.tool") as span:
            span.set_attribute("tool.name", name)
            result = await self._call(name, arguments)
            outcome = "error" if not result.ok else ("no_data" if result.no_data else "ok")
            span.set_attribute("tool.outcome", outcome)
            if result.error:
                span.set_attribute("tool.error", scrubbed_reason(result.error))
        METRICS.tool_call(name, outcome, "panda")
        return result

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.failure(f"unknown tool {name!r}; available: {', '.join(sorted(self._tools))}")
        try:
            args = validate_arguments(name, tool.spec.input_schema, arguments)
        except ArgumentError as exc:
            return ToolResult.failure(str(exc))
        try:
            data = await tool.handler(self.client, args)
        except PandaNotFound as exc:
            return ToolResult.failure(f"{name}: not found in PanDA ({exc.detail or exc.endpoint})")
        except PandaRefused as exc:  # the operator must see PanDA's own reason
            return ToolResult.failure(f"{name}: PanDA refused: {exc.message}")
        except PandaUnavailable as exc:
            return ToolResult.failure(f"{name}: PanDA is unreachable: {exc}")
        except PandaConfigError as exc:
            return ToolResult.failure(f"{name}: PanDA client is misconfigured: {exc}")
        except PandaError as exc:
            return ToolResult.failure(f"{name}: {exc}")
        except Exception as exc:  # a handler bug must surface as a failure, not crash the caller's turn
            log.exception("built-in tool %s raised", name)
            return ToolResult.failure(f"{name}: internal error {type(exc).__name__}: {exc}")
        return ToolResult.success(data)

    async def aclose(self) -> None:
        await self.client.aclose()
