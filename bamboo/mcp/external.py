"""Clients for external MCP servers (Streamable HTTP and stdio) behind the ``ToolCaller`` protocol.

Connecting is fail-open: a server that cannot be reached contributes no tools, and ``status`` says
why. Each connection lives in one owner task that enters and leaves the SDK's context managers, so
``connect()`` and ``close()`` may be called from different tasks, and a server that dies mid-session
turns into a failure result for the calls in flight instead of a hang.

External tools are never read-only by default: the operator names them in ``read_only_tools``, or
opts in to the server's own ``read_only_hint`` with ``trust_annotations``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any

import httpx2
import mcp.types as mt
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from pydantic import BaseModel, Field

from bamboo.offload import BudgetExceeded, ChildFailed, in_child, in_thread, load_plain
from bamboo.tools.arguments import ArgumentError, validate_arguments
from bamboo.mcp.config import McpConfigError, McpServerConfig
from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec

log = logging.getLogger(__name__)


class ToolTrust(BaseModel):
    """Why a tool is (or is not) considered read-only: shown by ``bamboo mcp check``."""

    name: str
    read_only: bool
    reason: str


class McpServerStatus(BaseModel):
    name: str
    transport: str
    enabled: bool = True
    reachable: bool = False
    error: str | None = None
    tools: list[ToolTrust] = Field(default_factory=list)
    filtered_out: list[str] = Field(default_factory=list, description="listed by the server, removed by include/exclude")


def decide_read_only(config: McpServerConfig, tool: mt.Tool) -> ToolTrust:
    hint = tool.annotations.read_only_hint if tool.annotations is not None else None
    if tool.name in config.read_only_tools:
        return ToolTrust(name=tool.name, read_only=True, reason="named in read_only_tools")
    if hint is True and config.trust_annotations:
        return ToolTrust(name=tool.name, read_only=True, reason="server hints read-only and trust_annotations is on")
    if hint is True:
        return ToolTrust(name=tool.name, read_only=False,
                         reason="server hints read-only, but trust_annotations is off and read_only_tools does not name it")
    return ToolTrust(name=tool.name, read_only=False, reason="not declared read-only by the server config")


def _describe_exception(exc: BaseException) -> str:
    """Task groups wrap the real cause; dig it out so the operator sees 'connection refused', not 'TaskGroup'."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


# The most text one tool answer may carry (its text blocks together, an error's included). A server decides
# how much it sends, and its one text block is decoded as JSON: 63 MB of it took 0.6 s of the worker's
# event loop. No consumer carries that much (the sandbox bridge forwards 256 KiB of a result and refuses,
# unread, one whose plain form passes 512 KiB; a prompt takes far less), so a larger answer is refused, not
# decoded. It was 4 MiB, which is 0.35-0.6 s of JSON decoding when the text is a dense array of numbers.
MAX_RESULT_TEXT_CHARS = 1024 * 1024
# Up to this much text is decoded at once on the loop (cheaper than the hand-off); more off it.
DECODE_INLINE_CHARS = 64 * 1024
# Decoding JSON is one C call that keeps the GIL however it is sized, so a thread does not free the loop from it:
# up to this much (at most ~25 ms of dense numbers) is decoded in the offload pool; more in a child process, which
# hands the value back pickled (`bamboo.offload.load_plain`: 1 MiB of numbers loads in ~10-20 ms, against ~0.1 s
# to decode).
DECODE_THREAD_CHARS = 256 * 1024
DECODE_BUDGET_S = 30.0


def convert_result(result: mt.CallToolResult) -> ToolResult:
    """A tool answer as a `ToolResult` (its one text block decoded as JSON when it is JSON); an answer whose text
    is over `MAX_RESULT_TEXT_CHARS` is refused with one line, not quoted: a head of it could end inside a secret
    that a later scrubber would no longer recognise. Sized by the answer: `read_result` is the one for the loop."""
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    size = sum(len(t) for t in texts)
    if size > MAX_RESULT_TEXT_CHARS:
        what = "error message" if result.is_error else "answer"
        return ToolResult.failure(f"the tool's {what} is {size} characters of text, over the {MAX_RESULT_TEXT_CHARS}-"
                                  "character cap; ask for less")
    if result.is_error:
        return ToolResult.failure(" ".join(texts).strip() or "the server reported an error without a message")
    if result.structured_content is not None:
        return ToolResult.success(result.structured_content)
    if _one_text_to_decode(result, texts):
        try:
            return ToolResult.success(json.loads(texts[0]))
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder goes: kept as text
            return ToolResult.success(texts[0])
    if texts:
        return ToolResult.success(texts)
    other = [c.model_dump(mode="json") for c in result.content]
    return ToolResult.success(other)


def _one_text_to_decode(result: mt.CallToolResult, texts: list[str]) -> bool:
    """Whether `convert_result` decodes the answer's one text block as JSON (the step sized by the answer)."""
    return not result.is_error and result.structured_content is None and len(texts) == 1


async def read_result(result: mt.CallToolResult, *, budget_s: float = DECODE_BUDGET_S) -> ToolResult:
    """`convert_result` for the event loop, within ``budget_s``: an answer past `DECODE_INLINE_CHARS` of text is
    read in the offload pool, and one text block past `DECODE_THREAD_CHARS` to decode as JSON in a child process
    (sizes capped by `convert_result`, which refuses a larger answer without decoding it)."""
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    size = sum(len(t) for t in texts)
    if size <= DECODE_INLINE_CHARS or size > MAX_RESULT_TEXT_CHARS:  # small, or refused unread
        return convert_result(result)
    try:
        if size > DECODE_THREAD_CHARS and _one_text_to_decode(result, texts):
            answer = await in_child("decode_json", texts[0].encode("utf-8", "surrogatepass"), budget_s=budget_s,
                                    what="decoding the tool's answer")
            # "T": not JSON (or nested deeper than the decoder goes), kept as text, as `convert_result` keeps it
            return ToolResult.success(load_plain(answer[1:]) if answer[:1] == b"J" else texts[0])
        return await in_thread(convert_result, result, budget_s=budget_s, what="reading the tool's answer")
    except (BudgetExceeded, ChildFailed) as exc:
        return ToolResult.failure(f"the tool's answer could not be read: {exc}")


class McpSessionClient(ABC):
    """Shared lifecycle of one MCP server connection; subclasses only choose the transport."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.status = McpServerStatus(name=config.name, transport=config.transport, enabled=config.enabled)
        self._specs: dict[str, ToolSpec] = {}
        self.server_tools: list[mt.Tool] = []
        self._session: ClientSession | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lost: str | None = None
        self._last_attempt: float | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @abstractmethod
    def _open_transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[Any]:
        """An async context manager yielding (read_stream, write_stream, ...)."""

    async def connect(self) -> McpServerStatus:
        """Never raises: on any failure the server contributes zero tools and ``status.error`` says why."""
        if not self.config.enabled:
            self.status.error = "disabled in the server config"
            return self.status
        if self._connected():
            return self.status
        if self._owner is not None:
            await self.close()
        self._lost = None
        self._last_attempt = time.monotonic()
        self._stop = asyncio.Event()
        ready: asyncio.Future[list[mt.Tool]] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own_session(ready), name=f"mcp:{self.name}")
        try:
            tools = await asyncio.wait_for(asyncio.shield(ready), timeout=self.config.connect_timeout_s)
        except (Exception, asyncio.TimeoutError) as exc:
            ready.cancel()  # nobody will read it now; the owner must not park an exception in it
            reason = "timed out connecting" if isinstance(exc, asyncio.TimeoutError) else _describe_exception(exc)
            self.status.reachable = False
            self.status.error = reason
            log.warning("MCP server %s unreachable, contributing no tools: %s", self.name, reason)
            await self.close()
            return self.status
        self._absorb(tools)
        self.status.reachable = True
        self.status.error = None
        log.info("MCP server %s connected: %d tools", self.name, len(self._specs))
        return self.status

    async def _own_session(self, ready: asyncio.Future[list[mt.Tool]]) -> None:
        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._open_transport(stack))
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                tools: list[mt.Tool] = []
                cursor: str | None = None
                while True:
                    page = (await session.list_tools(params=mt.PaginatedRequestParams(cursor=cursor)) if cursor
                            else await session.list_tools())
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                if ready.done():  # connect() stopped waiting; close() is on its way
                    return
                self._session = session
                ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - the owner must record every way a session ends
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(_describe_exception(exc)))
            elif self._lost is None and not isinstance(exc, asyncio.CancelledError):
                self.status.reachable = False
                self.status.error = f"session ended: {_describe_exception(exc)}"
                log.warning("MCP server %s session ended: %s", self.name, self.status.error)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    def _absorb(self, tools: list[mt.Tool]) -> None:
        self.server_tools = list(tools)
        self._specs.clear()
        self.status.tools = []
        self.status.filtered_out = []
        for tool in tools:
            if not self.config.wants(tool.name):
                self.status.filtered_out.append(tool.name)
                continue
            trust = decide_read_only(self.config, tool)
            self.status.tools.append(trust)
            self._specs[tool.name] = ToolSpec(
                name=tool.name,
                description=tool.description or "",
                input_schema=tool.input_schema or {"type": "object", "properties": {}},
                read_only=trust.read_only,
                external_access=True,
                origin=ToolOrigin.EXTERNAL,
                server=self.name,
            )

    def list_tools(self) -> list[ToolSpec]:
        return list(self._specs.values())

    def _connected(self) -> bool:
        return self._session is not None and self._owner is not None and not self._owner.done() and self._lost is None

    async def _maybe_reconnect(self) -> None:
        """A server that died may be back (restarted, redeployed); try again, but not on every call."""
        if not self.config.enabled:
            return
        if self._last_attempt is not None and time.monotonic() - self._last_attempt < self.config.reconnect_interval_s:
            return
        log.info("MCP server %s: reconnecting", self.name)
        await self.connect()

    def _mark_lost(self, reason: str) -> None:
        self._lost = reason
        self.status.reachable = False
        self.status.error = reason
        self._stop.set()
        log.warning("MCP server %s: %s", self.name, reason)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Never retries a call: a tool may change state, so a failed call is reported, not repeated."""
        if not self._connected():
            await self._maybe_reconnect()
            if not self._connected():
                return ToolResult.failure(f"MCP server {self.name} is not connected ({self.status.error or 'closed'})")
        spec = self._specs.get(name)
        if spec is None:
            return ToolResult.failure(f"MCP server {self.name} has no tool {name!r}")
        try:
            arguments = validate_arguments(name, spec.input_schema, arguments)
        except ArgumentError as exc:
            return ToolResult.failure(str(exc))
        except Exception as exc:  # the server's schema itself may be malformed; let the server judge
            log.debug("schema of %s.%s not checkable locally: %s", self.name, name, exc)
        session, owner = self._session, self._owner
        assert session is not None and owner is not None
        call = asyncio.create_task(session.call_tool(name, arguments, read_timeout_seconds=self.config.call_timeout_s))
        done, _ = await asyncio.wait({call, owner}, timeout=self.config.call_timeout_s + 5,
                                     return_when=asyncio.FIRST_COMPLETED)
        if call not in done:
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            if owner in done:
                self._mark_lost(f"connection lost during {name}: {self.status.error}")
                return ToolResult.failure(f"MCP server {self.name} went away during {name}: {self.status.error}")
            return ToolResult.failure(f"MCP server {self.name} did not answer {name} within {self.config.call_timeout_s}s")
        try:
            result = call.result()
        except Exception as exc:
            reason = _describe_exception(exc)
            if not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED:
                self._mark_lost(f"connection lost during {name}: {reason}")
            return ToolResult.failure(f"MCP server {self.name} failed on {name}: {reason}")
        return await read_result(result)

    async def close(self) -> None:
        owner, self._owner = self._owner, None
        self._specs.clear()
        if owner is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(owner), timeout=5)
        except (asyncio.TimeoutError, Exception):
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)


class ExternalMcpClient(McpSessionClient):
    """Streamable HTTP transport; headers (with ``${ENV}`` expanded) go on every request."""

    def _open_transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[Any]:
        assert self.config.url is not None
        http = httpx2.AsyncClient(
            headers=self.config.resolved_headers(),
            timeout=httpx2.Timeout(self.config.connect_timeout_s, read=self.config.call_timeout_s + 5),
        )
        stack.push_async_callback(http.aclose)
        return streamable_http_client(self.config.url, http_client=http)


class StdioMcpClient(McpSessionClient):
    """Spawns the server; it inherits a minimal environment plus the entry's ``env`` (``${ENV}`` expanded)."""

    def _open_transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[Any]:
        assert self.config.command is not None
        params = StdioServerParameters(command=self.config.command, args=self.config.args,
                                       env=self.config.resolved_env() or None)
        errlog = _stderr_sink()
        if errlog is not sys.stderr:
            stack.callback(errlog.close)
        return stdio_client(params, errlog=errlog)


def _stderr_sink() -> Any:
    """Server stderr is noise for the operator's terminal; keep it out unless debugging."""
    if log.isEnabledFor(logging.DEBUG):
        return sys.stderr
    return open(os.devnull, "w")  # noqa: SIM115 - lives as long as the subprocess


def client_for(config: McpServerConfig) -> McpSessionClient:
    return ExternalMcpClient(config) if config.url else StdioMcpClient(config)


__all__ = [
    "ExternalMcpClient",
    "McpConfigError",
    "McpServerStatus",
    "McpSessionClient",
    "StdioMcpClient",
    "ToolTrust",
    "client_for",
    "convert_result",
    "decide_read_only",
    "read_result",
]
