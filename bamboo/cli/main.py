"""The `bamboo` command: one entry point for operators."""

from __future__ import annotations

import functools
import importlib
import json
from typing import Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from bamboo.cli.common import BambooGroup, console, fail, run, set_debug
from bamboo.frontends.inert_text import inert_markup, inert_rich
from bamboo.settings import get_settings

# Where each sub-command lives. A module is imported when its command runs (or when help lists it), not at
# every start: `bamboo approve` then loads the Temporal client and the investigation contract, not the store,
# the console, the populate view and the tool layer too (the whole tree took about 3 s of CPU to import).
# Each module's `register(app)` adds exactly these names; tests/unit/test_cli_lazy.py holds the two together.
COMMAND_MODULES: dict[str, str] = {
    "populate": "bamboo.cli.populate_cmd",
    "demo": "bamboo.cli.demo_cmd",
    "analyze": "bamboo.cli.analyze_cmd",
    "analyze-batch": "bamboo.cli.analyze_cmd",
    "feedback": "bamboo.cli.feedback_cmd",
    "investigate": "bamboo.cli.investigate_cmd",
    "approvals": "bamboo.cli.investigate_cmd",
    "approve": "bamboo.cli.investigate_cmd",
    "keys": "bamboo.cli.keys_cmd",
    "sign": "bamboo.cli.keys_cmd",
    "exec": "bamboo.cli.exec_cmd",
    "console": "bamboo.cli.console_cmd",
    "serve-mattermost": "bamboo.cli.mattermost_cmd",
    "tools": "bamboo.cli.tools_cmd",
    "mcp": "bamboo.cli.tools_cmd",
    "panda-sim": "bamboo.cli.tools_cmd",
}


# Commands that serve until stopped (or replace the process): no command span, since one trace would hold
# everything they serve.
LONG_RUNNING = frozenset({"worker", "console", "serve-mattermost", "mcp", "panda-sim"})


@functools.cache
def commands_of(module: str) -> TyperGroup | None:
    """The click commands a CLI module registers, or None when the module's optional dependencies are absent."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None
    sub = typer.Typer()
    mod.register(sub)
    return typer.main.get_group(sub)


class RootGroup(BambooGroup):
    """`bamboo`: its own commands, and those of `COMMAND_MODULES`, loaded when named. (The context is typed
    `Any` as in `BambooGroup.invoke`: typer's click types moved between its releases.)"""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        return own + sorted(name for name in COMMAND_MODULES if name not in own)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in COMMAND_MODULES:
            return found
        group = commands_of(COMMAND_MODULES[cmd_name])
        return None if group is None else group.get_command(ctx, cmd_name)

    def invoke(self, ctx: Any) -> Any:
        """Run the command inside one root span named for it (``bamboo populate``) when tracing is on, so
        every Temporal call it makes belongs to one trace (bamboo/telemetry.py); with tracing off nothing
        of OpenTelemetry is imported."""
        try:
            settings = get_settings()
        except Exception:  # noqa: BLE001 — invalid settings: the command itself says so, untraced
            settings = None
        name = self._command_name(ctx) if settings is not None and settings.otel_exporter != "none" else None
        if settings is None or name is None:
            return super().invoke(ctx)
        from bamboo.telemetry import command_span

        with command_span(settings, name):
            return super().invoke(ctx)

    def _command_name(self, ctx: Any) -> str | None:
        """``bamboo <command>`` (``bamboo kb stats`` for a group's command); None for ``--help`` and for a
        server (``LONG_RUNNING``), whose one trace would hold everything it serves for as long as it runs."""
        words = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not words or words[0] in LONG_RUNNING or any(w in ("--help", "-h") for w in words):
            return None
        name = f"bamboo {words[0]}"
        command = self.get_command(ctx, words[0])
        if command is not None and hasattr(command, "commands") and len(words) > 1 and not words[1].startswith("-"):
            name += f" {words[1]}"
        return name


app = typer.Typer(help="Bamboo on Temporal: learn from resolved PanDA incidents, diagnose tasks, investigate with review.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=RootGroup)
dev_app = typer.Typer(help="The embedded stack (Temporal dev server, Postgres+pgvector, worker).", no_args_is_help=True)
config_app = typer.Typer(help="Configuration.", no_args_is_help=True)
kb_app = typer.Typer(help="The knowledge base.", no_args_is_help=True)
audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)
app.add_typer(dev_app, name="dev")
app.add_typer(config_app, name="config")
app.add_typer(kb_app, name="kb")
app.add_typer(audit_app, name="audit")


@app.callback()
def _global_options(debug: bool = typer.Option(
        False, "--debug", help="Show the full traceback of an error instead of the one-line message")) -> None:
    """Bamboo on Temporal: learn from resolved PanDA incidents, diagnose tasks, investigate with review."""
    set_debug(debug)


@dev_app.command("up")
def dev_up(no_worker: bool = typer.Option(False, "--no-worker", help="Start only Temporal and Postgres")) -> None:
    """Start whatever is not running yet; safe to run twice."""
    from bamboo.devstack.ports import PortInUseError
    from bamboo.devstack.stack import up
    from bamboo.devstack.temporal_server import TemporalStartError

    try:
        state = up(get_settings(), with_worker=not no_worker, echo=console.print)
    except (PortInUseError, TemporalStartError, RuntimeError) as exc:
        fail(str(exc))
    if state.ui_url:
        console.print(f"Temporal Web: [bold]{state.ui_url}[/]")


@dev_app.command("down")
def dev_down() -> None:
    """Stop the worker, Temporal and Postgres (their data stays in the data directory)."""
    from bamboo.devstack.postgres import PostgresStopError
    from bamboo.devstack.stack import down

    try:
        down(get_settings(), echo=console.print)
    except PostgresStopError as exc:
        fail(str(exc))


@dev_app.command("status")
def dev_status(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """What runs where."""
    from bamboo.devstack.stack import status

    services = status(get_settings())
    if as_json:
        print(json.dumps([s.model_dump() for s in services], indent=2, default=str))
        return
    table = Table("service", "state", "where", "pid", "log", "note")
    for column in table.columns:
        column.overflow = "fold"  # addresses and log paths are never cut at 80 columns
    for s in services:
        table.add_row(s.name, "[green]running[/]" if s.running else "[red]stopped[/]", s.where, str(s.pid or "-"),
                      s.log or "-", s.note)
    console.print(table)


@config_app.command("show")
def config_show(as_json: bool = typer.Option(False, "--json")) -> None:
    """The effective configuration (environment, .env, defaults) with secrets masked."""
    masked = get_settings().masked()
    if as_json:
        console.print_json(json.dumps(masked, default=str), ensure_ascii=True)
        return
    table = Table("setting", "value")
    for k, v in masked.items():
        table.add_row(f"BAMBOO_{k.upper()}", str(v))
    console.print(table)


@app.command("worker")
def worker_cmd() -> None:
    """Run a worker in the foreground (what `bamboo dev up` starts in the background)."""
    import os
    import sys

    os.execv(sys.executable, [sys.executable, "-m", "worker"])


@kb_app.command("stats")
def kb_stats(as_json: bool = typer.Option(False, "--json")) -> None:
    """Counts of graphs, nodes and edges by kind, passages, blobs, audit rows."""
    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await store.knowledge.stats()

    stats = _with_store_errors(go)
    if as_json:
        console.print_json(stats.model_dump_json(), ensure_ascii=True)
        return
    table = Table("what", "count")
    table.add_row("incident graphs", str(stats.graphs))
    for k, n in stats.nodes.items():
        table.add_row(f"nodes: {k}", str(n))
    for k, n in stats.edges.items():
        table.add_row(f"edges: {k}", str(n))
    table.add_row("edge provenance rows", str(stats.provenance))
    table.add_row("passages (vectors)", str(stats.passages))
    table.add_row("blobs", str(stats.blobs))
    table.add_row("audit rows", str(stats.audit_rows))
    table.add_row("open human-input requests", str(stats.human_requests_open))
    console.print(table)


@kb_app.command("graph")
def kb_graph(graph_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """What one incident contributed (e.g. `panda:40123456:broken`)."""
    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await store.knowledge.graph_view(graph_id)

    view = _with_store_errors(go)
    if view is None:
        fail(f"no graph {graph_id!r}; list them with `bamboo kb stats` or look up ids in Temporal Web")
    if as_json:
        console.print_json(json.dumps(view, default=str), ensure_ascii=True)
        return
    # A graph is what a model extracted from an incident: its summary, warnings and node names are shown
    # inert (as text, never as markup or terminal controls).
    console.print(f"[bold]{inert_markup(graph_id, one_line=True)}[/] incident "
                  f"{inert_markup(str(view['incident_id']), one_line=True)} stored {view['stored_at']}")
    if view["summary"]:
        console.print(inert_rich(view["summary"]))
    for w in view["warnings"]:
        console.print(f"[yellow]warning:[/] {inert_markup(str(w), one_line=True)}")
    table = Table("source", "edge", "target", "freq", "conf")
    for e in view["edges"]:
        table.add_row(inert_rich(e["src"], one_line=True), inert_rich(e["kind"], one_line=True),
                      inert_rich(e["dst"], one_line=True), str(e["frequency"]), f"{e['confidence']:.2f}")
    console.print(table)


@audit_app.command("verify")
def audit_verify(as_json: bool = typer.Option(
        False, "--json", help="the report as JSON (rows, ok, first_bad_seq, reason, checkpoint, warnings); "
                              "the exit status is the same")) -> None:
    """Walk the hash chain and hold it against the signed checkpoint; exit 1 and name the first row that
    does not hold (modified, missing, cut off the end, or rewritten)."""
    from rich.text import Text

    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await store.audit.verify()

    report = _with_store_errors(go)
    if as_json:
        print(json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=True))  # warnings quote stored text
        raise typer.Exit(0 if report.ok else 1)
    for warning in report.warnings:
        console.print(Text.assemble(("warning:", "yellow"), " ", warning), soft_wrap=True)
    if report.ok:
        reach = (f"; it reaches the signed checkpoint at row {report.checkpoint_seq} ({report.checkpoint_at})"
                 if report.checkpoint_seq else "")
        console.print(Text.assemble(("audit chain intact", "green"), f": {report.rows} rows{reach}"), soft_wrap=True)
        return
    where = f"broken at row {report.first_bad_seq}" if report.first_bad_seq else "does not verify"
    fail(f"audit chain {where}: {report.reason}")


@audit_app.command("checkpoint")
def audit_checkpoint(
    start_new: bool = typer.Option(False, "--start-new", help="start a new signed checkpoint over the chain as it is"),
    reason: str = typer.Option(..., "--reason", min=1, help="why (recorded in the audit row and the start record)"),
    actor: str | None = typer.Option(None, "--as", help="who starts it (default: $BAMBOO_OPERATOR or your login)"),
) -> None:
    """Start a new signed checkpoint after the old one went missing or was replaced, once you have
    investigated why (`bamboo audit verify`). Audited; the old file, if any, is kept beside the new one.

    A worker never does this by itself over an existing chain."""
    from bamboo.cli.investigate_cmd import default_identity
    from bamboo.cli.store_access import opened_store
    from bamboo.store.audit_checkpoint import CheckpointError

    if not start_new:
        fail("say what to do: --start-new (the only action); `bamboo audit verify` shows the chain's state")
    from policy.identity import IdentityError, canonical_identity

    try:
        who = canonical_identity(actor or default_identity())
    except IdentityError as exc:
        fail(str(exc))
        return

    async def go():
        async with opened_store(get_settings()) as store:
            return await store.audit.start_new_checkpoint(who, reason[:500])

    try:
        seq, kept = _with_store_errors(go)
    except CheckpointError as exc:
        fail(str(exc))
        return
    console.print(f"signed a new audit checkpoint at row {seq} (started by {who})"
                  + (f"; the previous checkpoint is kept at {kept}" if kept else ""))


@audit_app.command("tail")
def audit_tail(limit: int = typer.Option(20, min=1, max=1000),
               as_json: bool = typer.Option(False, "--json", help="every row in full, machine-readable")) -> None:
    """The most recent audit rows."""
    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await store.audit.tail(limit)

    rows = list(reversed(_with_store_errors(go)))
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        # Audit bodies quote what sessions and models said: the line is text, not markup.
        console.print(inert_rich(f"{row['seq']:>6} {row['at']} {row['actor']:<14} {row['kind']:<16} "
                                 f"{json.dumps(row['body'])[:120]}", one_line=True), highlight=False)


def _with_store_errors(make):
    from bamboo.store import StoreNotConfigured

    try:
        return run(make())
    except (StoreNotConfigured, ConnectionError) as exc:
        fail(str(exc))


def main() -> None:
    """The console script: run the command, then leave without interpreter teardown.

    The Temporal client's Rust threads can call into Python while the interpreter finalises, which aborts a
    finished command with "PyGILState_Release: thread state ... must be current" (a known SDK issue). So
    exit handlers run while the interpreter is whole, the streams are flushed, and the process ends with the
    command's own exit status.
    """
    import atexit
    import os
    import sys

    code = 0
    try:
        app()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
        import traceback

        traceback.print_exc()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
