"""The operator commands, run through typer against the simulator and real MCP servers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bamboo.cli.tools_cmd import mcp_app, tools_app
from bamboo.mcp.config import McpServerConfig
from bamboo.mcp.external import StdioMcpClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.settings import get_settings
from tests.panda.incidents import DONE_TASK, MEMORY_TASK, write_incidents

from .conftest import TIME_SERVER, free_port

runner = CliRunner()


@pytest.fixture
def cli_env(panda_simulator: PandaSimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            database_url: str) -> Iterator[Path]:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"servers": [
        {"name": "time", "command": TIME_SERVER, "trust_annotations": True, "exclude_tools": ["^convert"]},
        {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout_s": 5},
    ]}))
    monkeypatch.setenv("BAMBOO_DATABASE_URL", database_url)  # every call is audited
    monkeypatch.setenv("BAMBOO_PANDA_API_URL", panda_simulator.api_url)
    monkeypatch.setenv("BAMBOO_PANDA_MONITOR_URL", panda_simulator.monitor_url)
    monkeypatch.setenv("BAMBOO_MCP_SERVERS_CONFIG", str(servers))
    get_settings.cache_clear()
    yield servers
    get_settings.cache_clear()


def test_tools_list_json_shows_sources_and_flags(cli_env: Path) -> None:
    result = runner.invoke(tools_app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    by_name = {t["name"]: t for t in report["tools"]}
    assert by_name["kill_task"]["read_only"] is False
    assert by_name["get_current_time"]["server"] == "time" and by_name["get_current_time"]["read_only"]
    assert "convert_time" not in by_name
    assert {s["name"]: s["reachable"] for s in report["servers"]} == {"time": True, "gone": False}


def test_tools_list_table(cli_env: Path) -> None:
    cli_env.write_text(json.dumps({"servers": [
        {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout_s": 5}]}))
    result = runner.invoke(tools_app, ["list"])
    assert result.exit_code == 0, result.output
    assert "get_scout_job_details" in result.stdout and "gone contributes no tools" in result.stdout


def test_tools_call_outcomes(cli_env: Path) -> None:
    ok = runner.invoke(tools_app, ["call", "get_task_details", "--args", json.dumps({"task_id": MEMORY_TASK})])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["jediTaskID"] == MEMORY_TASK
    empty = runner.invoke(tools_app, ["call", "get_failed_job_log_summary", "--args", json.dumps({"task_id": DONE_TASK})])
    assert empty.exit_code == 0 and "no data" in empty.stderr
    bad = runner.invoke(tools_app, ["call", "get_task_details", "--args", '{"task_id": "x"}'])
    assert bad.exit_code == 1 and "task_id" in bad.stderr
    not_json = runner.invoke(tools_app, ["call", "get_task_details", "--args", "{task_id: 1}"])
    assert not_json.exit_code == 2 and "not valid JSON" in not_json.stderr


def _cli_audit(database_url: str) -> list[tuple[str, str, str]]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT actor, body->>'tool', body->>'outcome' FROM audit WHERE kind = 'tool_call' "
                            "AND body->>'via' = 'cli' ORDER BY seq").fetchall()
    return [tuple(r) for r in rows]


def test_tools_call_refuses_state_changing_tools_and_audits_every_call(
        cli_env: Path, http_server, database_url: str, panda_simulator: PandaSimulator) -> None:
    """Issue: `bamboo tools call kill_task` killed at once, with no review, no identity and no audit row."""
    cli_env.write_text(json.dumps({"servers": [
        {"name": "web", "url": http_server.url, "trust_annotations": True}]}))
    kill = runner.invoke(tools_app, ["call", "kill_task", "--args", json.dumps({"task_id": MEMORY_TASK}),
                                     "--as", "Alice"])
    assert kill.exit_code == 2 and "bamboo investigate" in kill.stderr
    unannotated = runner.invoke(tools_app, ["call", "add", "--args", json.dumps({"a": 1, "b": 2}), "--as", "alice"])
    assert unannotated.exit_code == 2 and "changes state" in unannotated.stderr
    secret = "password=hunter2x and key AKIAIOSFODNN7EXAMPLE"
    echoed = runner.invoke(tools_app, ["call", "echo", "--args", json.dumps({"text": secret}), "--as", "alice"])
    assert echoed.exit_code == 0, echoed.output
    assert "hunter2x" not in echoed.stdout and "AKIAIOSFODNN7EXAMPLE" not in echoed.stdout
    assert "redacted" in echoed.stderr
    assert _cli_audit(database_url) == [("alice", "kill_task", "denied"), ("alice", "add", "denied"),
                                        ("alice", "echo", "allowed")]
    calls = httpx.get(f"{panda_simulator.base_url}/sim/calls", timeout=10).json()
    assert not [c for c in calls if "kill" in c["endpoint"]]


def test_mcp_check_reports_each_server(cli_env: Path) -> None:
    result = runner.invoke(mcp_app, ["check", "--json"])
    assert result.exit_code == 1
    statuses = {s["name"]: s for s in json.loads(result.stdout)}
    assert statuses["time"]["reachable"] and statuses["time"]["filtered_out"] == ["convert_time"]
    assert statuses["time"]["tools"][0]["reason"].startswith("server hints read-only")
    assert not statuses["gone"]["reachable"] and statuses["gone"]["error"]


def test_mcp_check_shows_each_servers_transport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: the transport, printed in brackets, was taken by rich for markup and vanished."""
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"servers": [
        {"name": "time", "command": TIME_SERVER, "trust_annotations": True},
        {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp", "connect_timeout_s": 5}]}))
    monkeypatch.setenv("BAMBOO_MCP_SERVERS_CONFIG", str(servers))
    monkeypatch.setenv("COLUMNS", "200")
    get_settings.cache_clear()
    try:
        result = runner.invoke(mcp_app, ["check"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("time [stdio] reachable") for line in lines), result.stdout
    assert any(line.startswith("gone [http] unreachable") for line in lines), result.stdout


def test_mcp_check_rejects_a_bad_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "servers.json"
    bad.write_text(json.dumps({"servers": [{"name": "x"}]}))
    monkeypatch.setenv("BAMBOO_MCP_SERVERS_CONFIG", str(bad))
    get_settings.cache_clear()
    try:
        result = runner.invoke(mcp_app, ["check"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2 and "servers[0] (x): give exactly one of 'url'" in " ".join(result.stderr.split())


async def test_mcp_serve_over_stdio(tmp_path: Path) -> None:
    incident = {
        "incident_id": "mem-1",
        "task_data": {"jediTaskID": 1, "status": "failed", "errorDialog": "maxPSS exceeded the ramCount limit"},
        "resolution_record": {"cause": "Insufficient memory request", "resolution": "Raise ramCount",
                              "procedure": ["get_scout_job_details", "compare maxPSS with ramCount"]},
    }
    (tmp_path / "mem.json").write_text(json.dumps(incident))
    launcher = "from bamboo.cli.tools_cmd import mcp_app; mcp_app()"
    client = StdioMcpClient(McpServerConfig(name="bamboo", command=sys.executable,
                                            args=["-c", launcher, "serve", "--incidents", str(tmp_path)],
                                            trust_annotations=True))
    status = await client.connect()
    try:
        assert status.reachable, status.error
        assert {s.name for s in client.list_tools() if s.read_only} == {
            "causes_for_symptom", "similar_incidents", "procedures_for_cause"}
        causes = await client.call_tool("causes_for_symptom", {"symptom": "maxPSS exceeded"})
        assert causes.data["causes"][0]["cause"] == "Insufficient memory request"
        procedures = await client.call_tool("procedures_for_cause", {"cause": "insufficient memory"})
        assert procedures.data["procedures"][0]["steps"][0] == "get_scout_job_details"
        nothing = await client.call_tool("similar_incidents", {"description": "cvmfs unreachable"})
        assert nothing.ok and nothing.data["incidents"] == []
    finally:
        await client.close()


def _wait_for_port(process: subprocess.Popen, port: int) -> None:
    """Readiness, not timing: poll until the server accepts a connection (or has exited)."""
    for _ in range(400):
        assert process.poll() is None, "bamboo mcp serve exited during start-up"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"bamboo mcp serve did not listen on {port}")


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_mcp_serve_over_both_transports_with_the_official_client(tmp_path: Path, transport: str) -> None:
    """Issue 27: stdio only. The official client sees the same server over stdio and streamable HTTP."""
    from importlib.metadata import version

    from mcp import Client, StdioServerParameters

    incident = {"incident_id": "mem-1",
                "task_data": {"jediTaskID": 1, "status": "failed", "errorDialog": "maxPSS exceeded the ramCount limit"},
                "resolution_record": {"cause": "Insufficient memory request", "resolution": "Raise ramCount",
                                      "procedure": ["get_scout_job_details"]}}
    (tmp_path / "mem.json").write_text(json.dumps(incident))
    args = ["-c", "from bamboo.cli.tools_cmd import mcp_app; mcp_app()", "serve", "--incidents", str(tmp_path)]
    process = None
    if transport == "stdio":
        target: object = StdioServerParameters(command=sys.executable, args=args)
    else:
        port = free_port()
        process = subprocess.Popen([sys.executable, *args, "--transport", transport, "--port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_port(process, port)
        target = f"http://127.0.0.1:{port}/mcp"
    try:
        async with Client(target) as client:  # type: ignore[arg-type]
            assert client.server_info.version == version("bamboo-temporal")
            assert client.server_capabilities.resources is None and client.server_capabilities.prompts is None
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["similar_incidents"].input_schema["properties"]["limit"]["maximum"] == 50
            answer = await client.call_tool("causes_for_symptom", {"symptom": "maxPSS exceeded"})
            assert answer.structured_content["causes"][0]["cause"] == "Insufficient memory request"
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=15) == 0
            assert "http://127.0.0.1:" in (process.stderr.read() if process.stderr else "")


def test_panda_sim_command_serves_and_stops_on_interrupt(tmp_path: Path) -> None:
    write_incidents(tmp_path)
    launcher = ("import typer; from bamboo.cli.tools_cmd import panda_sim; "
                "app = typer.Typer(); app.command()(panda_sim); app()")
    process = subprocess.Popen([sys.executable, "-c", launcher, "--port", "0", "--incidents", str(tmp_path)],
                               stderr=subprocess.PIPE, text=True)
    try:
        api_url = None
        for line in process.stderr:
            if line.startswith("API"):
                api_url = line.split()[1]
                break
        assert api_url, "the command did not print its API URL"
        body = httpx.get(f"{api_url}/task/get_detailed_info", params={"task_id": MEMORY_TASK},
                         headers={"Accept": "application/json"}).json()  # PanDA answers JSON only when asked
        assert body["data"]["jediTaskID"] == MEMORY_TASK
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_tools_list_shows_what_external_servers_say_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tool names, descriptions and errors come from servers the deployment does not own: `rich.markup.escape`
    kept their markup from acting but let a terminal escape through, and the shadowed and unreachable lines
    were not escaped at all."""
    from contextlib import asynccontextmanager
    from types import SimpleNamespace

    from bamboo.cli import tools_cmd
    from bamboo.tools.model import ToolOrigin, ToolSpec

    hostile = "\x1b]8;;https://evil.example\x07[reverse]click[/reverse]\x1b]8;;\x07"
    spec = ToolSpec(name="lookup", description=hostile, read_only=True, origin=ToolOrigin.EXTERNAL, server="web")
    report = SimpleNamespace(
        list_tools=lambda: [spec],
        shadowed=[SimpleNamespace(model_dump=lambda: {"name": hostile, "hidden_from": "web", "kept_from": "builtin"})],
        statuses=[SimpleNamespace(model_dump=lambda: {"name": "web2", "reachable": False, "error": hostile})])

    @asynccontextmanager
    async def composite(_settings):
        yield report

    monkeypatch.setattr(tools_cmd, "_composite", composite)
    monkeypatch.setattr(tools_cmd, "out", tools_cmd.Console(width=300, force_terminal=False))
    result = runner.invoke(tools_app, ["list"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert result.stdout.count("[reverse]click[/reverse]") == 3, result.stdout
