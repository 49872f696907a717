"""Operator commands for the tool layer, mounted on the main ``bamboo`` app:

    bamboo tools list [--json]            every tool, where it comes from, read-only or not
    bamboo tools call NAME --args JSON    call one tool and print its result
    bamboo mcp check [--json]             per external server: reachable, tools, read-only and why
    bamboo mcp serve --incidents DIR      Bamboo's knowledge as a read-only MCP server (stdio, or
                                          --transport streamable-http --port N)
    bamboo panda-sim                      the PanDA simulator for the demo and manual testing
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from bamboo.frontends.inert_text import inert_markup
from bamboo.mcp.config import McpConfigError, load_servers_config
from bamboo.panda.errors import PandaConfigError
from bamboo.settings import Settings, get_settings

if TYPE_CHECKING:
    from bamboo.mcp.composite import CompositeToolCaller

# The MCP SDK and the HTTP stack are imported inside the commands, so `bamboo --help` stays quick.

tools_app = typer.Typer(help="List and call the tools the assistant can use.", no_args_is_help=True)
mcp_app = typer.Typer(help="External MCP servers, and Bamboo as an MCP server.", no_args_is_help=True)

out = Console(emoji=False)  # tool descriptions are servers' text: no ":emoji:" turns into a picture
err = Console(stderr=True, emoji=False)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {_inert(message)}")
    return typer.Exit(code)


def _composite(settings: Settings) -> "CompositeToolCaller":
    from bamboo.mcp.factory import build_tool_caller

    try:
        return build_tool_caller(settings)
    except (McpConfigError, PandaConfigError) as exc:
        raise _fail(str(exc)) from exc


def _inert(text: str) -> str:
    """What an MCP server, its tools or an error said, for a markup string: no markup, control or invisible
    character acts (tool names, descriptions and errors come from servers the deployment does not own)."""
    return inert_markup(text, one_line=True)


def _shortened(text: str, limit: int) -> str:
    """The text up to `limit` characters, cut at a word and marked, so a listing never ends mid-word."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,.;:") + " …"


def _flag(value: bool) -> str:
    return "[green]yes[/green]" if value else "[yellow]no[/yellow]"


@tools_app.command("list")
def tools_list(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False) -> None:
    """Show every callable tool: built-ins first, then each reachable external server's."""

    async def run() -> dict[str, Any]:
        async with _composite(get_settings()) as tools:
            return {
                "tools": [s.model_dump(mode="json") for s in tools.list_tools()],
                "shadowed": [s.model_dump() for s in tools.shadowed],
                "servers": [s.model_dump() for s in tools.statuses],
            }

    report = asyncio.run(run())
    if as_json:
        out.print_json(json.dumps(report), ensure_ascii=True)
        return
    # At 80 columns the description keeps most of the width: the flags are one short column and a long name
    # folds rather than squeezing the description into a six-character strip.
    table = Table(title="Tools", caption="access: ro = read-only, rw = may change state; ext = reaches outside")
    table.add_column("name", overflow="fold", max_width=32)
    table.add_column("source", overflow="fold", max_width=12)
    table.add_column("access", no_wrap=True)
    table.add_column("description", overflow="fold", ratio=1, min_width=24)
    for t in report["tools"]:
        access = ("ro" if t["read_only"] else "rw") + (" ext" if t["external_access"] else "")
        table.add_row(_inert(t["name"]), _inert(t["server"] or t["origin"]), access,
                      _inert(_shortened(t["description"] or "", 90)))
    out.print(table)
    for s in report["shadowed"]:
        out.print(f"[yellow]shadowed:[/yellow] {_inert(s['name'])} from {_inert(s['hidden_from'])} "
                  f"(kept the one from {_inert(s['kept_from'])})")
    for s in report["servers"]:
        if not s["reachable"]:
            out.print(f"[yellow]server {_inert(s['name'])} contributes no tools:[/yellow] {_inert(str(s['error']))}")


@tools_app.command("call")
def tools_call(
    name: Annotated[str, typer.Argument(help="Tool name, as shown by `bamboo tools list`")],
    args: Annotated[str, typer.Option("--args", help='Arguments as a JSON object, e.g. \'{"task_id": 123}\'')] = "{}",
    identity: Annotated[str | None, typer.Option("--as", help="who calls (recorded in the audit log)")] = None,
) -> None:
    """Call one read-only tool. Every call is audited and its output scrubbed of secrets; a state-changing
    tool is refused here (it runs only as reviewed, approved code in `bamboo investigate`).
    Exit code 0 with data or "no data", 1 when the tool failed, 2 on bad input or a refused call."""
    from bamboo.cli.investigate_cmd import default_identity
    from policy.identity import IdentityError, canonical_identity

    try:
        arguments = json.loads(args)
    except json.JSONDecodeError as exc:
        raise _fail(f"--args is not valid JSON ({exc.msg} at column {exc.colno}); pass an object like '{{\"task_id\": 1}}'") from exc
    if not isinstance(arguments, dict):
        raise _fail("--args must be a JSON object, e.g. '{\"task_id\": 1}'")
    try:
        actor = canonical_identity(identity or default_identity())
    except IdentityError as exc:
        raise _fail(str(exc)) from exc
    settings = get_settings()
    outcome = asyncio.run(_audited_call(settings, name, arguments, actor))
    if isinstance(outcome, str):
        raise _fail(outcome)
    result, data, redactions = outcome
    if not result.ok:
        raise _fail(result.error or "tool failed", code=1)
    if redactions:
        err.print(f"[yellow]{redactions} secret(s) redacted from the output[/yellow]")
    if result.no_data:
        err.print("[yellow]no data[/yellow]: the tool looked and found nothing")
    # ASCII only: a tool's strings reach the terminal as \\u escapes, never as C1 or bidi characters.
    out.print_json(json.dumps(data, default=str), ensure_ascii=True)


async def _audited_call(settings: Settings, name: str, arguments: dict[str, Any], actor: str):
    """The call, its audit row and its scrubbed output; or the one-line reason it was refused."""
    from bamboo.audit import AuditEvent
    from bamboo.cli.store_access import opened_store
    from bamboo.sandbox.bridge import args_digest
    from policy.scrub import scrub_text, scrub_value

    composite = _composite(settings)
    if any(name in {s.name for s in b.list_tools()} for b in composite.builtins):
        composite.externals = []  # built-ins win clashes anyway; spare the external connections
    async with contextlib.AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(opened_store(settings))
        except Exception as exc:  # noqa: BLE001 — an unaudited call is refused, whatever kept the log away
            return (f"cannot record this call in the audit log ({type(exc).__name__}: {exc}); "
                    "start the stack (`bamboo dev up`) and retry")
        tools = await stack.enter_async_context(composite)
        spec = next((s for s in tools.list_tools() if s.name == name), None)
        body = {"tool": name, "args_sha256": args_digest(arguments), "via": "cli"}
        if spec is not None and not spec.read_only:
            await store.audit.append(AuditEvent(kind="tool_call", actor=actor, run_id="cli",
                                                body={**body, "outcome": "denied", "reason": "state_changing"}))
            return (f"{name} changes state, so it runs only as reviewed, approved code: ask for it in "
                    "`bamboo investigate --task-id N` and have it approved")
        result = await tools.call_tool(name, arguments)
        data, redactions = scrub_value(result.data)
        if result.error:
            result = result.model_copy(update={"error": scrub_text(result.error).text})
        await store.audit.append(AuditEvent(kind="tool_call", actor=actor, run_id="cli", body={
            **body, "outcome": "allowed" if result.ok else "error", "redactions": redactions,
            "reason": None if result.ok else "tool_error"}))
        return result, data, redactions


@mcp_app.command("check")
def mcp_check(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False) -> None:
    """Connect to each configured server and report what it offers. Exit code 1 if an enabled one is down."""
    settings = get_settings()
    try:
        config = load_servers_config(settings.mcp_servers_config)
    except McpConfigError as exc:
        raise _fail(str(exc)) from exc
    if not config.servers:
        out.print("No external MCP servers configured (set BAMBOO_MCP_SERVERS_CONFIG to a servers file).")
        return

    from bamboo.mcp.external import client_for

    async def run():
        clients = [client_for(s) for s in config.servers]
        try:
            return await asyncio.gather(*(c.connect() for c in clients))
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    statuses = asyncio.run(run())
    if as_json:
        out.print_json(json.dumps([s.model_dump() for s in statuses]), ensure_ascii=True)
    else:
        for s in statuses:
            state = "[green]reachable[/green]" if s.reachable else f"[red]unreachable[/red] ({_inert(str(s.error))})"
            if not s.enabled:
                state = "[dim]disabled[/dim]"
            # the transport in brackets is text, not markup: unescaped, rich took "[stdio]" for a tag and dropped it
            out.print(f"[bold]{_inert(s.name)}[/bold] {_inert(f'[{s.transport}]')} {state}")
            if s.tools:
                table = Table(show_header=True, box=None, padding=(0, 2))
                for col in ("tool", "read-only", "why"):
                    table.add_column(col)
                for t in s.tools:
                    table.add_row(_inert(t.name), _flag(t.read_only), _inert(t.reason))
                out.print(table)
            if s.filtered_out:
                out.print(f"  filtered out by include/exclude: {_inert(', '.join(s.filtered_out))}")
    if any(s.enabled and not s.reachable for s in statuses):
        raise typer.Exit(1)


class McpTransport(str, Enum):
    """How `bamboo mcp serve` talks to its clients."""

    stdio = "stdio"
    streamable_http = "streamable-http"


def _load_reader(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise _fail(f"--reader must look like 'package.module:factory', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise _fail(f"cannot load reader factory {spec!r}: {exc}") from exc
    return factory(get_settings())


@mcp_app.command("serve")
def mcp_serve(
    incidents: Annotated[Path | None, typer.Option(help="Answer from resolved incident files in this directory")] = None,
    reader: Annotated[str | None, typer.Option(help="'module:factory' returning a KnowledgeReader from Settings")] = None,
    transport: Annotated[McpTransport, typer.Option(help="stdio for a client that starts this command; "
                                                         "streamable-http to serve clients at http://HOST:PORT/mcp")]
    = McpTransport.stdio,
    host: Annotated[str, typer.Option(help="Interface to bind (streamable-http)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (streamable-http)", min=1, max=65535)] = 8790,
) -> None:
    """Serve read-only knowledge tools (causes_for_symptom, similar_incidents, procedures_for_cause) over stdio
    or streamable HTTP, from the knowledge store by default."""
    from bamboo.mcp.incident_reader import IncidentFileKnowledgeReader
    from bamboo.mcp.knowledge_server import build_knowledge_server

    if incidents is not None and reader is not None:
        raise _fail("give at most one of --incidents DIR or --reader module:factory")
    if incidents is None and reader is None:
        reader = "bamboo.mcp.knowledge_reader:from_settings"  # what populate learned
    if incidents is not None:
        if not incidents.is_dir():
            raise _fail(f"--incidents {incidents} is not a directory")
        knowledge = IncidentFileKnowledgeReader.from_dir(incidents)
    else:
        knowledge = _load_reader(reader or "")
    server = build_knowledge_server(knowledge)
    if transport is McpTransport.stdio:
        server.run("stdio")
        return
    err.print(f"MCP      http://{host}:{port}/mcp   (streamable HTTP; Ctrl-C stops)")
    try:
        server.run("streamable-http", host=host, port=port)
    except KeyboardInterrupt:
        pass


def panda_sim(
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port)")] = 8780,
    host: Annotated[str, typer.Option(help="Interface to bind")] = "127.0.0.1",
    incidents: Annotated[Path, typer.Option(help="Incident files the tasks come from")] = Path("examples/incidents"),
    require_token: Annotated[str | None, typer.Option(help="Demand this OIDC bearer token (with an Origin VO) on every request")] = None,
    jedi_delay: Annotated[float, typer.Option(help="Seconds before JEDI applies a registered kill or retry")] = 30.0,
    production_role: Annotated[bool, typer.Option(
        "--production-role", help="Give the test identity PanDA's production role (kill, retry, pause any "
                                  "task), as a shifter has; without it, a plain user as on the real server")] = False,
) -> None:
    """Serve the PanDA API v1 (as the real server speaks it) and the monitor's log browser from incident
    fixtures (GET /sim/calls shows every kill/retry received, /sim/commands what was registered for JEDI).
    Callers are the test identity, a plain user unless --production-role (the demo's retry needs it)."""
    from bamboo.panda.simulator import PandaSimulator
    from bamboo.panda.simulator.contract_seed import TEST_USER

    if not incidents.is_dir():
        raise _fail(f"--incidents {incidents} is not a directory")
    if jedi_delay < 0:
        raise _fail(f"--jedi-delay {jedi_delay} is negative; give the seconds JEDI waits, e.g. 30")
    sim = PandaSimulator(incidents, host=host, port=port, require_token=require_token, jedi_delay_s=jedi_delay,
                         production_role=production_role)
    err.print(f"PanDA simulator: {len(sim.world.tasks)} tasks from {incidents}")
    if production_role:
        err.print(f"caller   {TEST_USER}, with the production role: may kill, retry and pause any task")
    else:
        err.print(f"caller   {TEST_USER}, a plain user as on the real server: kill and retry only its own tasks, "
                  "no pause or resume (--production-role to act as a shifter, as the demo's retry needs)")
    for name, reason in sim.world.skipped_files.items():
        err.print(f"[yellow]skipped {_inert(name)}:[/yellow] {_inert(reason)}")
    try:
        sim.start()
    except RuntimeError as exc:
        raise _fail(f"{exc} (is the port already in use? try --port 0)") from exc
    err.print(f"API      {sim.api_url}   (BAMBOO_PANDA_API_URL)")
    err.print(f"monitor  {sim.monitor_url}   (BAMBOO_PANDA_MONITOR_URL)")
    err.print(f"client   {sim.url}   (PANDA_URL and PANDA_URL_SSL for panda-client)")
    err.print(f"record   {sim.base_url}/sim/calls   (every kill/retry received; /sim/commands: registered for JEDI)")
    try:
        sim.wait()
    except KeyboardInterrupt:
        sim.stop()


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")
    app.add_typer(mcp_app, name="mcp")
    app.command("panda-sim")(panda_sim)
