"""Against real servers: mcp-server-time over stdio and the test server over Streamable HTTP."""

from __future__ import annotations

import asyncio

import psutil

from bamboo.mcp.config import McpServerConfig
from bamboo.mcp.external import ExternalMcpClient, StdioMcpClient, decide_read_only
from bamboo.tools.model import ToolOrigin

from .conftest import TIME_SERVER, RunningServer, free_port


def time_config(**kw) -> McpServerConfig:
    return McpServerConfig(name="time", command=TIME_SERVER, call_timeout_s=10, **kw)


async def test_stdio_lists_and_calls_and_reports_tool_errors() -> None:
    client = StdioMcpClient(time_config())
    status = await client.connect()
    try:
        assert status.reachable and status.error is None
        specs = {s.name: s for s in client.list_tools()}
        assert set(specs) == {"get_current_time", "convert_time"}
        assert specs["get_current_time"].origin is ToolOrigin.EXTERNAL and specs["get_current_time"].server == "time"
        ok = await client.call_tool("get_current_time", {"timezone": "Europe/Zurich"})
        assert ok.ok and ok.data["timezone"] == "Europe/Zurich"
        converted = await client.call_tool(
            "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
        assert converted.ok and converted.data["target"]["datetime"].startswith(converted.data["source"]["datetime"][:10])
        server_error = await client.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
        assert not server_error.ok and "Mars/Olympus" in server_error.error
        bad_args = await client.call_tool("get_current_time", {"tz": "UTC"})
        assert not bad_args.ok and "timezone" in bad_args.error and "tz" in bad_args.error
    finally:
        await client.close()


async def test_read_only_needs_the_operator_or_trusted_annotations() -> None:
    client = StdioMcpClient(time_config())
    await client.connect()
    try:
        assert not any(s.read_only for s in client.list_tools())
        assert "trust_annotations is off" in client.status.tools[0].reason
        served = client.server_tools
        assert all(t.annotations.read_only_hint for t in served)
    finally:
        await client.close()
    named = time_config(read_only_tools=["convert_time"])
    assert {t.name for t in served if decide_read_only(named, t).read_only} == {"convert_time"}
    trusted = time_config(trust_annotations=True)
    assert all(decide_read_only(trusted, t).read_only for t in served)
    unhinted = served[0].model_copy(update={"annotations": None})
    assert not decide_read_only(trusted, unhinted).read_only


async def test_include_exclude_filters() -> None:
    client = StdioMcpClient(time_config(exclude_tools=["^convert"]))
    await client.connect()
    try:
        assert [s.name for s in client.list_tools()] == ["get_current_time"]
        assert client.status.filtered_out == ["convert_time"]
        refused = await client.call_tool("convert_time", {})
        assert not refused.ok and "has no tool" in refused.error
    finally:
        await client.close()


async def test_stdio_server_killed_mid_session_fails_then_reconnects() -> None:
    client = StdioMcpClient(time_config(reconnect_interval_s=0))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    await client.connect()
    try:
        spawned = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        assert spawned
        for p in spawned:
            p.kill()
        result = await asyncio.wait_for(client.call_tool("get_current_time", {"timezone": "UTC"}), 15)
        assert not result.ok and "time" in result.error
        assert not client.status.reachable and "connection lost" in client.status.error
        again = await asyncio.wait_for(client.call_tool("get_current_time", {"timezone": "UTC"}), 30)
        assert again.ok, again.error
        assert client.status.reachable
    finally:
        await client.close()


async def test_http_list_call_error_and_annotations(http_server: RunningServer) -> None:
    client = ExternalMcpClient(McpServerConfig(name="web", url=http_server.url, read_only_tools=["add"], call_timeout_s=10))
    status = await client.connect()
    try:
        assert status.reachable
        specs = {s.name: s for s in client.list_tools()}
        assert specs["add"].read_only and not specs["echo"].read_only
        assert (await client.call_tool("add", {"a": 2, "b": 40})).data == {"result": 42}
        assert (await client.call_tool("echo", {"text": "hi"})).data in ("hi", {"result": "hi"})
        failed = await client.call_tool("explode", {"message": "the disk is on fire"})
        assert not failed.ok and "the disk is on fire" in failed.error
    finally:
        await client.close()


async def test_http_headers_expand_env_and_missing_env_fails_open(http_server: RunningServer, monkeypatch) -> None:
    monkeypatch.setenv("TEST_MCP_TOKEN", "abc")
    good = ExternalMcpClient(McpServerConfig(name="web", url=http_server.url,
                                             headers={"Authorization": "Bearer ${TEST_MCP_TOKEN}"}))
    bad = ExternalMcpClient(McpServerConfig(name="web2", url=http_server.url,
                                            headers={"Authorization": "Bearer ${TEST_MCP_UNSET_TOKEN}"}))
    try:
        assert (await good.connect()).reachable
        status = await bad.connect()
        assert not status.reachable and "TEST_MCP_UNSET_TOKEN" in status.error
        assert bad.list_tools() == []
    finally:
        await good.close()
        await bad.close()


async def test_unreachable_http_server_contributes_nothing() -> None:
    client = ExternalMcpClient(McpServerConfig(name="gone", url=f"http://127.0.0.1:{free_port()}/mcp",
                                               connect_timeout_s=5))
    status = await client.connect()
    assert not status.reachable and status.error
    assert client.list_tools() == []
    result = await client.call_tool("echo", {"text": "x"})
    assert not result.ok
    await client.close()


async def test_http_server_killed_mid_call_gives_a_failure(disposable_http_server: RunningServer) -> None:
    client = ExternalMcpClient(McpServerConfig(name="doomed", url=disposable_http_server.url, call_timeout_s=20))
    await client.connect()
    try:
        pending = asyncio.create_task(client.call_tool("sleep_for", {"seconds": 30}))
        await asyncio.sleep(0.5)
        disposable_http_server.process.kill()
        result = await asyncio.wait_for(pending, 15)
        assert not result.ok and "doomed" in result.error
        after = await asyncio.wait_for(client.call_tool("echo", {"text": "x"}), 15)
        assert not after.ok and "not connected" in after.error
        assert not client.status.reachable
    finally:
        await client.close()
