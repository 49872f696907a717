"""`bamboo analyze` and `bamboo analyze-batch` (`bamboo feedback` is in feedback_cmd).

Analyses run as durable workflows in the worker; this module starts or re-attaches to them, follows
their progress, prints the diagnosis and writes each AnalysisResult as JSON. Ctrl-C only detaches.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

import typer
from rich.padding import Padding
from rich.table import Table
from temporalio.client import Client

from bamboo.analysis.client import AnalysisBatch, AnalysisClient, AnalysisError
from bamboo.analysis.contract import BATCH_PREFIX
from bamboo.analysis.contract import AnalysisResult, BatchAnalyzeInput, BatchAnalyzeResult, result_file_name
from bamboo.analysis.provenance import provenance
from bamboo.analysis.task_files import TaskFileError, check_task_id, list_task_files, read_task_file, task_fields
from bamboo.cli.batch_progress import follow as view_batch
from bamboo.cli.common import console, fail, run
from bamboo.frontends.inert_text import inert_markup, inert_rich, inert_terminal
from bamboo.contract import Queue
from bamboo.settings import Settings, get_settings



async def _client(settings: Settings) -> Client:
    from bamboo.temporal_client import TemporalUnavailable, connect

    try:
        return await connect(settings)
    except TemporalUnavailable as exc:
        fail(str(exc))
        raise


async def fetch_task(settings: Settings, task_id: int) -> dict:
    """The task's fields from PanDA, or a message that says how to get them another way."""
    from bamboo.panda.client import PandaClient
    from bamboo.panda.errors import PandaConfigError, PandaError, PandaNotFound, PandaUnavailable
    from bamboo.panda.task_records import task_for_analysis

    hint = "or pass the task's JSON with --task-data FILE"
    try:
        async with PandaClient.from_settings(settings) as panda:
            task, note = await task_for_analysis(panda, task_id)
    except PandaConfigError as exc:
        fail(f"the PanDA client is not configured: {exc}; {hint}")
    except PandaNotFound:
        fail(f"PanDA at {settings.panda_api_url} has no task {task_id}; {hint}")
    except PandaUnavailable as exc:
        fail(f"cannot reach PanDA at {settings.panda_api_url} ({exc}); set BAMBOO_PANDA_API_URL (or start the "
             f"simulator with `bamboo panda-sim`), {hint}")
    except PandaError as exc:
        fail(f"PanDA could not return task {task_id}: {exc}; {hint}")
        raise
    if note:  # it quotes PanDA's error, text from a remote service: shown inert
        typer.echo(f"note: {inert_terminal(note, one_line=True)}", err=True)
    return task


def out_problem(path: Path, *, directory: bool = False) -> str | None:
    """Why ``--out PATH`` cannot be written, or None; asked before anything starts, so an analysis (or a batch)
    does not run only to fail at the end ("Is a directory", "File exists" when its parent is a file). A result
    file (``directory`` False) needs an existing writable directory to go in, and PATH must not be a directory;
    a results directory (analyze-batch) is PATH itself when it exists, else made in an existing writable parent."""
    if directory and path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            return f"--out {path}: the directory is not writable; pass a directory you can write to"
        return None
    if directory and path.exists():
        return f"--out {path}: not a directory; pass a directory for the results (it is made if missing)"
    if not directory and path.is_dir():
        return f"--out {path}: is a directory; pass a file path for the result, such as {path / 'result.json'}"
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        return f"--out {path}: {parent} {what}; create the directory first or pass a path in an existing one"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {path}: {parent} is not writable; pass a path in a directory you can write to"
    if not directory and path.exists() and not os.access(path, os.W_OK):
        return f"--out {path}: the file is not writable; pass another path or make it writable"
    return None


def write_result(result: AnalysisResult, path: Path) -> None:
    """Into a directory that exists: `out_problem` asked before the analysis, and a batch makes its own."""
    path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")


def incidents_note(incidents: list[str], shown: int = 3) -> str:
    if not incidents:
        return ""
    more = f" and {len(incidents) - shown} more" if len(incidents) > shown else ""
    return f", from {len(incidents)} incident(s): {', '.join(incidents[:shown])}{more}"


def print_diagnosis(result: AnalysisResult) -> None:
    """The diagnosis. Causes, explanations, suggestions and the e-mail draft are the model's or the task's
    words: each goes through ``inert_markup`` before it meets rich's markup, with ``one_line`` wherever it is
    printed on a line of its own: "Chosen by" carries the model's override reason, whose line breaks printed
    a forged "Resolution (stored, ...)" and "Chosen by: an operator" line."""
    console.rule(f"[bold]Task {result.task_id} ({inert_markup(result.status or 'unknown', one_line=True)})")
    said = provenance(result)
    if said.first_answer:
        console.print(f"[cyan]{inert_markup(said.first_answer, one_line=True)}[/]")
    colour = "yellow" if result.is_novel else "green"
    console.print(f"Root cause: [bold {colour}]{inert_markup(result.root_cause, one_line=True)}[/] — confidence "
                  f"{inert_markup(said.confidence, one_line=True)}")
    console.print(f"Chosen by: {inert_markup(said.chosen_by, one_line=True)}")
    if result.resolution:
        console.print(f"Resolution (stored{inert_markup(incidents_note(result.resolution_incidents), one_line=True)}): "
                      f"{inert_markup(result.resolution, one_line=True)}")
    elif not result.is_novel:
        console.print("Resolution: none stored for this cause")
    if result.explanation:
        console.print(f"Why: {inert_markup(result.explanation, one_line=True)}")
    for e in result.supporting_evidence[:5]:
        console.print(f"  • {inert_markup(e, one_line=True)}")
    if result.candidates:
        table = Table("#", "candidate cause", "clue types", "support", "incidents", "confirmed")
        for i, c in enumerate(result.candidates[:5], 1):
            table.add_row(str(i), inert_markup(c.name, one_line=True), str(c.breadth), f"{c.support:.2f}", str(c.frequency),
                          str(c.confirmations))
        console.print(table)
    for lead in result.novel_leads:
        console.print(f"[yellow]novel lead:[/] {inert_markup(lead.symptom, one_line=True)} — {inert_markup(lead.reason, one_line=True)}")
    for step in result.steps:
        if step.status in ("unavailable", "failed"):
            console.print(f"[yellow]{inert_markup(step.step, one_line=True)} {inert_markup(step.status, one_line=True)}:[/] "
                          f"{inert_markup(step.detail, one_line=True)}")
    for s in result.suggestions:
        console.print(f"[cyan]suggestion:[/] {inert_markup(s, one_line=True)}")
    for n in result.notes:
        console.print(f"[dim]note: {inert_markup(n, one_line=True)}[/]")
    if result.email_content:
        # Indented under its label, so no line of a draft (model-written) can pass for one of the lines above.
        console.print(f"\n[bold]Email draft[/] — {inert_markup(result.email_subject, one_line=True)}")
        console.print(Padding(inert_rich(result.email_content), (0, 0, 0, 2)))


async def analyze_once(client: Client, task: dict, threshold: float, deadline_s: float | None = None,
                       on_first: Callable[[AnalysisResult], None] | None = None) -> AnalysisResult:
    """Start (or find) the task's analysis and wait for it; `on_first` sees the ranking's answer meanwhile.

    The model's deadline is this process's BAMBOO_LLM_TIMEOUT_S unless given: the workflow cannot read settings."""
    deadline = deadline_s if deadline_s is not None else get_settings().llm_timeout_s
    return await AnalysisClient(client).analyze(task, exploration_threshold=threshold, model_deadline_s=deadline,
                                                on_first=on_first)


def analyze(
    task_id: int = typer.Option(None, "--task-id", help="jediTaskID to fetch from PanDA and diagnose"),
    task_data: Path = typer.Option(None, "--task-data", help="A JSON file with the task's fields (or an incident file)"),
    out: Path = typer.Option(None, "--out", help="Write the AnalysisResult JSON here"),
    as_json: bool = typer.Option(False, "--json", help="Print the AnalysisResult as JSON"),
) -> None:
    """Diagnose one problem task as a durable AnalyzeTask workflow (read-only on the knowledge base)."""
    if (task_id is None) == (task_data is None):
        fail("give exactly one of --task-id N or --task-data FILE")
    if out is not None and (problem := out_problem(out)):
        fail(problem)
    settings = get_settings()

    async def go() -> AnalysisResult:
        # One check of the task wherever it enters (`task_files`), before PanDA is asked or a workflow starts.
        try:
            if task_data is not None:
                # The link the operator named is followed; links inside the file's directory are judged as any batch's.
                task = read_task_file(task_data.resolve())
            else:
                task = task_fields(await fetch_task(settings, check_task_id(task_id)), f"task {task_id} from PanDA")
        except TaskFileError as exc:
            fail(str(exc))
        client = await _client(settings)

        def show_first(first: AnalysisResult) -> None:
            print_diagnosis(first)
            console.print("[dim]Waiting for the model's second opinion (Ctrl-C detaches; the analysis goes on)…[/]")

        try:
            return await analyze_once(client, task, settings.exploratory_investigation_threshold,
                                      settings.llm_timeout_s, None if as_json else show_first)
        except AnalysisError as exc:
            fail(str(exc))

    result = run(go())
    if out:
        write_result(result, out)
    if as_json:
        console.print_json(result.model_dump_json(), ensure_ascii=True)
    else:
        print_diagnosis(result)
        if out:
            console.print(f"Result written to {out}")


def default_batch_id(path: Path) -> str:
    return "analyze-" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]


COLLECT_AT_ONCE = 32


async def collect_finished(analyses: AnalysisClient, ids: list[str], out: Path) -> int:
    """Write the results of analyses that already finished (a batch that ran while nobody watched), asking the
    server about ``COLLECT_AT_ONCE`` of them at a time and saying how far it got: one at a time, in silence, 50,000
    tasks kept the command quiet for over a minute before the batch started and again after it ended."""
    wanted = [wid for wid in ids if not (out / result_file_name(wid)).exists()]
    gate = asyncio.Semaphore(COLLECT_AT_ONCE)
    asked = 0

    async def collect(wid: str, status: Any) -> int:
        nonlocal asked
        async with gate:
            result = await analyses.finished_result(wid)
        asked += 1
        status.update(f"looking for finished analyses: {asked} of {len(wanted)}")
        if result is None:
            return 0
        write_result(result, out / result_file_name(wid))
        return 1

    with console.status(f"looking for finished analyses: 0 of {len(wanted)}") as status:
        return sum(await asyncio.gather(*(collect(wid, status) for wid in wanted)))


async def follow_analysis_batch(batch: AnalysisBatch, client: Client | None = None) -> BatchAnalyzeResult | None:
    hint = f"the same command again (or --attach {batch.id.removeprefix(BATCH_PREFIX)})"
    return await view_batch(batch, hint, worker_queue=(client, Queue.MAIN) if client else None)


def analyze_batch(
    path: Path = typer.Argument(..., help="A directory of task (or incident) .json files"),
    out: Path = typer.Option(..., "--out", help="Directory for one AnalysisResult JSON per task"),
    attach: str = typer.Option(None, "--attach", help="Re-attach to a running batch by its id"),
    concurrency: int = typer.Option(4, min=1, max=256, help="Analyses run at once"),
    detach: bool = typer.Option(False, "--detach", help="Start and return immediately"),
    reanalyse: bool = typer.Option(False, "--reanalyse",
                                   help="Analyse every task again (after feedback), replacing its result in --out"),
) -> None:
    """Diagnose every task of a directory as a durable BatchAnalyze; tasks already analysed are skipped
    unless --reanalyse is given."""
    if problem := out_problem(out, directory=True):
        fail(problem)
    settings = get_settings()
    threshold = get_settings().exploratory_investigation_threshold

    async def go() -> None:
        try:
            sources = list_task_files(path)
        except TaskFileError as exc:
            fail(str(exc))
        client = await _client(settings)
        analyses = AnalysisClient(client)
        # Attaching is to a batch that exists (as `bamboo populate --attach`): a mistyped id started a new batch
        # under that id. The server answers whether it exists, without a worker.
        if attach and await analyses.batch(attach).status() is None:
            fail(f"no batch {attach}; run without --attach to start one")
        ids = [s.workflow_id() for s in sources]
        out.mkdir(parents=True, exist_ok=True)
        if reanalyse:  # the old results go; each task's analysis runs again and sees the feedback given since
            for wid in ids:
                (out / result_file_name(wid)).unlink(missing_ok=True)
        recovered = 0 if reanalyse else await collect_finished(analyses, ids, out)
        done_ids = [wid for wid in ids if (out / result_file_name(wid)).exists()]
        bid = attach or default_batch_id(path) + (f"-again-{int(time.time())}" if reanalyse else "")
        if recovered:
            console.print(f"Collected {recovered} analyses that finished while detached.")
        batch = await analyses.start_batch(
            BatchAnalyzeInput(batch_id=bid, path=str(path.resolve()), results_dir=str(out.resolve()),
                              concurrency=concurrency, exploration_threshold=threshold,
                              model_deadline_s=get_settings().llm_timeout_s))
        console.print(f"Batch [bold]{bid}[/]: {len(sources)} tasks, {len(done_ids)} already analysed — "
                      f"workflow id {batch.id}")
        if detach:
            console.print("Follow it by running the same command again.")
            return
        result = await follow_analysis_batch(batch, client)
        if result is None:
            return
        written = await collect_finished(analyses, ids, out)
        console.print(f"[bold]{bid}[/]: {result.done} analysed, {result.skipped} skipped (already analysed), "
                      f"{result.failed} failed of {result.total}" + (" (cancelled)" if result.cancelled else "")
                      + f"; {written} results written to {out}")
        for f in result.failures[:20]:
            console.print(f"  [red]✗[/] {inert_markup(f.source, one_line=True)}: {inert_markup(f.reason, one_line=True)}")

    run(go())


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
    app.command("analyze-batch")(analyze_batch)
