"""The composite built from Settings, against the simulator and real MCP servers."""

from __future__ import annotations

import json
from pathlib import Path

from bamboo.mcp.factory import build_tool_caller
from bamboo.panda.simulator import PandaSimulator
from bamboo.settings import Settings
from tests.panda.incidents import MEMORY_TASK

from .conftest import TIME_SERVER, RunningServer, free_port


def settings_for(sim: PandaSimulator, servers: list[dict], tmp_path: Path) -> Settings:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"servers": servers}))
    return Settings(panda_api_url=sim.api_url, panda_monitor_url=sim.monitor_url, mcp_servers_config=path)


async def test_builtins_win_clashes_and_the_loser_is_reported(
    panda_simulator: PandaSimulator, http_server: RunningServer, tmp_path: Path
) -> None:
    settings = settings_for(panda_simulator, [
        {"name": "web", "url": http_server.url, "trust_annotations": True},
        {"name": "time", "command": TIME_SERVER, "read_only_tools": ["get_current_time"]},
        {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout_s": 5},
        {"name": "off", "command": TIME_SERVER, "enabled": False},
    ], tmp_path)
    async with build_tool_caller(settings) as tools:
        names = [s.name for s in tools.list_tools()]
        assert len(names) == len(set(names))
        assert {"get_task_details", "kill_task", "echo", "add", "get_current_time", "convert_time"} <= set(names)
        assert [(s.name, s.hidden_from, s.kept_from) for s in tools.shadowed] == [
            ("get_task_details", "web", "builtin")]
        details = await tools.call_tool("get_task_details", {"task_id": MEMORY_TASK})
        assert details.ok and details.data["jediTaskID"] == MEMORY_TASK and "impostor" not in details.data
        echoed = await tools.call_tool("echo", {"text": "through the composite"})
        assert echoed.ok
        status = {s.name: s for s in tools.statuses}
        assert status["web"].reachable and status["time"].reachable
        assert not status["gone"].reachable and status["gone"].error
        assert not status["off"].reachable and "disabled" in status["off"].error
        spec = tools.spec("get_current_time")
        assert spec is not None and spec.read_only and spec.server == "time"
        assert not tools.spec("convert_time").read_only
        assert not (await tools.call_tool("nope", {})).ok


async def test_without_a_servers_file_only_builtins(panda_simulator: PandaSimulator) -> None:
    settings = Settings(panda_api_url=panda_simulator.api_url, panda_monitor_url=panda_simulator.monitor_url)
    async with build_tool_caller(settings) as tools:
        assert tools.statuses == []
        assert all(s.server is None for s in tools.list_tools())


async def test_a_name_never_moves_to_another_server_when_its_own_stops_answering(tmp_path: Path) -> None:
    """The same server configured twice, read-only credentials first: `add`, reviewed as read-only, went to the
    server that may change state once the first stopped answering (routes were chosen afresh at every call)."""
    from bamboo.mcp.composite import CompositeToolCaller
    from bamboo.mcp.config import McpServerConfig
    from bamboo.mcp.external import ExternalMcpClient

    from .conftest import start_http_server

    ro_server, rw_server = start_http_server(), start_http_server()
    ro = ExternalMcpClient(McpServerConfig(name="ro", url=ro_server.url, read_only_tools=["add"],
                                           reconnect_interval_s=0, connect_timeout_s=2, call_timeout_s=5))
    rw = ExternalMcpClient(McpServerConfig(name="rw", url=rw_server.url, call_timeout_s=5))
    tools = CompositeToolCaller(builtins=[], externals=[ro, rw])
    try:
        await tools.connect()
        spec = tools.spec("add")
        assert spec is not None and spec.server == "ro" and spec.read_only
        ro_server.stop()
        for _ in range(3):  # each failed call makes the client try the server again, which is gone
            answer = await tools.call_tool("add", {"a": 40, "b": 2})
            assert not answer.ok, answer
        assert tools.spec("add") is None or tools.spec("add").server == "ro"  # type: ignore[union-attr]
        assert ("add", "rw", "ro (not answering)") in [(s.name, s.hidden_from, s.kept_from) for s in tools.shadowed]
    finally:
        await tools.close()
        ro_server.stop()
        rw_server.stop()
