"""`bamboo populate`: start (or re-attach to) a PopulateBatch and follow it with a live progress bar.

The batch lives in Temporal, not in this process: Ctrl-C only detaches the view.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import typer
from temporalio.client import Client

from bamboo.accumulation.client import PopulateClient, PopulateHandle
from bamboo.batch.client import BatchNotFound
from bamboo.cli.batch_progress import follow as view_batch
from bamboo.cli.concurrency_note import concurrency_note, llm_offer
from bamboo.cli.common import console, fail, run
from bamboo.frontends.inert_text import inert_markup
from bamboo.ingest import SourceListingError, list_sources
from bamboo.accumulation.contract import WORKFLOW_QUEUE, PopulateInput, PopulateResult
from bamboo.settings import get_settings


def default_batch_id(path: Path) -> str:
    return "populate-" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]


async def follow(batch: PopulateHandle, quiet: bool = False, client: Client | None = None) -> PopulateResult | None:
    """Poll the progress (with the running slices' heartbeats) into a bar until the batch ends; Ctrl-C detaches.
    With ``client``, say when no worker polls the batch's queue."""
    hint = f"bamboo populate --attach {batch.batch_id}"
    return await view_batch(batch, hint, quiet=quiet, worker_queue=(client, WORKFLOW_QUEUE) if client else None)


def print_result(result: PopulateResult) -> None:
    console.print(f"[bold]{result.batch_id}[/]: {result.done} stored, {result.skipped} skipped (already learned), "
                  f"{result.failed} failed of {result.total}" + (" (cancelled)" if result.cancelled else ""))
    if result.escalated:
        console.print(f"  {result.escalated} incident(s) needed their own AccumulateIncident workflow "
                      f"(ids accumulate:{result.batch_id}:<index>; open them in Temporal Web for their steps)")
    for f in result.failures[:20]:
        console.print(f"  [red]✗[/] {inert_markup(f.source, one_line=True)}: {inert_markup(f.reason, one_line=True)}")
    if len(result.failures) > 20:
        console.print(f"  … and {len(result.failures) - 20} more")


async def _client() -> Client:
    from bamboo.temporal_client import TemporalUnavailable, connect

    try:
        return await connect(get_settings())
    except TemporalUnavailable as exc:
        fail(str(exc))
        raise


def populate(
    path: Path = typer.Argument(None, help="A directory of incident .json files or a .jsonl file"),
    attach: str = typer.Option(None, "--attach", help="Re-attach to a running batch by its id"),
    batch_id: str = typer.Option(None, help="Batch id (default: derived from the path)"),
    concurrency: int = typer.Option(
        None, min=1, max=256,
        help="Incidents talking to the model at once (slices and escalated incidents together); the workers' "
             "BAMBOO_LLM_CONCURRENCY caps it, and the start says what the batch gets"),
    max_review_retries: int = typer.Option(None, min=0, max=10, help="Reviewer rejections before storing the best"),
    detach: bool = typer.Option(False, "--detach", help="Start and return immediately"),
    one_workflow_per_incident: bool = typer.Option(
        False, "--one-workflow-per-incident",
        help="Give every incident its own AccumulateIncident workflow (each step visible in Temporal Web; several "
             "times slower). By default incidents run in slices and only the hard ones get their own workflow."),
    chunk_size: int = typer.Option(None, min=1, max=1024,
                                   help="Incidents per slice activity (default 8 x a slice's parallelism); smaller "
                                        "slices make pause take effect sooner, at more overhead"),
    relearn: bool = typer.Option(
        False, "--relearn",
        help="Learn every incident again, also those a stored graph was learned from (by default an incident "
             "whose file content is unchanged is skipped before any model call)"),
) -> None:
    """Learn resolved incidents into the knowledge graph as a durable PopulateBatch workflow.

    The happy path (extract, hard checks, LLM review, store) runs in slice activities that commit
    incidents in groups; an incident the reviewer rejects, that needs human input or whose model
    calls fail is escalated to its own AccumulateIncident workflow with the explorer and retries.
    An incident already learned from the same content is skipped (no model call) unless --relearn,
    so populating a directory again costs only its new and changed files. Ctrl-C detaches; the
    batch goes on."""
    settings = get_settings()

    async def go() -> None:
        client = await _client()
        batches = PopulateClient(client)
        if attach:
            try:
                batch = await batches.attach(attach)
            except BatchNotFound as exc:
                fail(f"no batch {attach!r} (Temporal has no workflow {exc.workflow_id}): give the id printed when the "
                     "batch started, or start one with `bamboo populate PATH`")
        else:
            if path is None:
                fail("give a PATH (directory or .jsonl) or --attach BATCH_ID")
            try:
                count = len(list_sources(path))
            except SourceListingError as exc:
                fail(str(exc))
            bid = batch_id or default_batch_id(path)
            asked = concurrency or settings.populate_concurrency
            try:
                batch = await batches.start(
                    PopulateInput(batch_id=bid, path=str(path.resolve()), concurrency=asked,
                                  continue_as_new_every=settings.populate_continue_as_new_every,
                                  max_review_retries=settings.max_review_retries if max_review_retries is None else max_review_retries,
                                  one_workflow_per_incident=one_workflow_per_incident, chunk_size=chunk_size,
                                  relearn=relearn))
                console.print(f"Batch [bold]{bid}[/] ({count} incidents) — workflow id {batch.id}")
                console.print(concurrency_note(asked, await llm_offer(client)), highlight=False, soft_wrap=True)
            except asyncio.CancelledError:  # Ctrl-C while the start was under way: whether it landed is unknown
                console.print(f"\nInterrupted while starting batch {bid}; if it started it goes on: "
                              f"bamboo populate --attach {bid}", highlight=False, soft_wrap=True)
                raise
            if detach:
                console.print(f"Follow it with: bamboo populate --attach {bid}")
                return
        result = await follow(batch, client=client)
        if result is not None:
            print_result(result)

    run(go())


def register(app: typer.Typer) -> None:
    app.command("populate")(populate)
