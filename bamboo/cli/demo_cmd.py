"""`bamboo demo`: the newcomer's tour — start the embedded stack, learn the bundled incidents,
show what was learned and where to look."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from bamboo.cli.common import console, fail, run
from bamboo.cli.populate_cmd import follow, print_result
from bamboo.frontends.inert_text import inert_rich
from bamboo.accumulation.client import PopulateClient
from bamboo.accumulation.contract import PopulateInput, PopulateResult
from bamboo.settings import get_settings
from bamboo.store.knowledge import KbStats

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"


async def _top_causes(limit: int = 8) -> tuple[list[tuple[str, int, str]], KbStats]:
    from bamboo.cli.store_access import opened_store

    async with opened_store(get_settings()) as store:
        async with store.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT c.name, count(DISTINCT p.graph_id) AS incidents, "
                "coalesce(string_agg(DISTINCT s.name, ', '), '') FROM nodes c "
                "JOIN edges e ON e.dst = c.id AND e.kind = 'indicate' JOIN nodes s ON s.id = e.src "
                "AND s.name NOT LIKE 'TaskStatus%%' JOIN edge_provenance p ON p.edge_id = e.id "
                "WHERE c.kind = 'Cause' GROUP BY c.name ORDER BY incidents DESC, c.name LIMIT %s", (limit,),
            )).fetchall()
        stats = await store.knowledge.stats()
    return [(r[0], r[1], r[2]) for r in rows], stats


def demo(
    incidents: Path = typer.Option(EXAMPLES, help="Incidents to learn"),
    concurrency: int = typer.Option(4, min=1, max=64),
) -> None:
    """Start the embedded stack, populate the bundled incidents, and print what was learned."""
    from bamboo.devstack.stack import up
    from bamboo.temporal_client import connect

    settings = get_settings()
    console.rule("[bold]1. Embedded stack")
    try:
        state = up(settings, echo=console.print)
    except Exception as exc:  # noqa: BLE001 — every start-up failure is reported the same way
        fail(str(exc))
    if not settings.llm_base_url:
        from bamboo.llm.local import WEIGHT_LABELS, resolved_weights

        console.print(f"LLM: local {WEIGHT_LABELS[resolved_weights(settings)]} (offline). It proves the plumbing, "
                      "not the diagnoses; set BAMBOO_LLM_BASE_URL / BAMBOO_LLM_MODEL / BAMBOO_LLM_API_KEY for a "
                      "capable model.")

    async def go() -> tuple[PopulateResult | None, str]:
        client = await connect(settings)
        console.rule("[bold]2. Populate the knowledge base")
        bid = f"demo-{int(time.time())}"
        batch = await PopulateClient(client).start(
            PopulateInput(batch_id=bid, path=str(incidents.resolve()), concurrency=concurrency,
                          continue_as_new_every=settings.populate_continue_as_new_every,
                          max_review_retries=settings.max_review_retries))
        console.print(f"PopulateBatch [bold]{batch.id}[/] started; the first LLM calls wait for the local model to load.")
        return await follow(batch, client=client), batch.id

    result, workflow_id = run(go())
    if result is None:
        return
    print_result(result)

    console.rule("[bold]3. What was learned")
    causes, stats = run(_top_causes())
    table = Table("cause", "incidents", "symptoms that indicate it")
    for name, n, symptoms in causes:
        table.add_row(inert_rich(name, one_line=True), str(n), inert_rich(symptoms, one_line=True))
    console.print(table)
    console.print(f"{stats.graphs} incident graphs · {sum(stats.nodes.values())} nodes · "
                  f"{sum(stats.edges.values())} edges · {stats.passages} vector passages · {stats.audit_rows} audit rows")

    _analyse_a_new_task(settings)

    from bamboo.cli.demo_loop import demo_investigation

    console.rule("[bold]5. An investigation: reuse, review, the requester accepting and an operator approving, the sandbox, audit")
    demo_investigation(settings)

    console.rule("[bold]Where to look")
    ui = state.ui_url or f"http://{settings.temporal_address.split(':')[0]}:{settings.temporal_ui_port}"
    console.print(f"Temporal Web:     {ui}/namespaces/{settings.temporal_namespace}/workflows")
    console.print(f"This batch:       {ui}/namespaces/{settings.temporal_namespace}/workflows/{workflow_id}"
                  " (its learn_slice activities are the slices)")
    console.print("Find by attribute: BambooKind=\"accumulate\" (incidents escalated to their own workflow) or "
                  "BambooTaskId=<jediTaskID> in the Web UI's query box")
    console.print("Knowledge base:   bamboo kb stats · bamboo kb graph panda:<jediTaskID>:<status>")
    console.print("Audit chain:      bamboo audit verify")
    console.print("Stop everything:  bamboo dev down")


def _analyse_a_new_task(settings) -> None:
    """Step 4: diagnose a task the knowledge base has never seen (a generated one, not an example)."""
    from bamboo.cli.analyze_cmd import analyze_once, print_diagnosis
    from bamboo.samples import generate_incidents
    from bamboo.temporal_client import connect

    console.rule("[bold]4. Diagnose a new task")
    task = dict(generate_incidents(1, seed=2026)[0].task_data)  # task fields only: its labels stay behind
    console.print(inert_rich(f"Task {task['jediTaskID']} ({task['status']}): {str(task.get('errorDialog', ''))[:160]}"))

    async def go():
        client = await connect(settings)
        return await analyze_once(client, task, get_settings().exploratory_investigation_threshold)

    print_diagnosis(run(go()))
    console.print(f"Again, or for your own task: bamboo analyze --task-data FILE · bamboo feedback {task['jediTaskID']} "
                  "--correct --cause \"...\"")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
