"""`bamboo feedback`: confirm or correct a diagnosis.

The verdict is written straight to the knowledge store's feedback table (the only table analysis writes),
with the task's clues, so it counts for similar tasks as well as for the task's own next analysis. The
clues come from the task's data: a file given with --task-data, else the input of the task's most recent
AnalyzeTask in Temporal (which holds exactly what was analysed); what the analysis proposed comes from
--proposed, else from that analysis's answer. A correction counts for similar tasks on the clues the
proposed cause has no evidence for (bamboo.analysis.ranking.with_verdicts), so it needs both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from bamboo.analysis.client import AnalysisClient, AnalysisError
from bamboo.analysis.clues import extract_clues
from bamboo.analysis.contract import Feedback
from bamboo.analysis.queries import clue_key
from bamboo.analysis.task_files import TaskFileError, read_task_file
from bamboo.cli.common import console, fail, run
from bamboo.frontends.inert_text import inert_markup
from bamboo.settings import Settings, get_settings


@dataclass
class LastAnalysis:
    """What the task's most recent AnalyzeTask read and answered, or why nothing is known."""

    task: dict[str, Any] | None = None
    proposed: str | None = None
    why: str = ""


async def last_analysis(settings: Settings, task_id: int) -> LastAnalysis:
    """The task data and the answer of the task's most recent analysis in Temporal."""
    from bamboo.temporal_client import TemporalUnavailable, connect

    try:
        client = await connect(settings)
    except TemporalUnavailable as exc:
        return LastAnalysis(why=f"Temporal is not reachable ({exc})")
    try:
        latest = await AnalysisClient(client).latest(task_id)
    except AnalysisError as exc:
        return LastAnalysis(why=f"Temporal could not list the task's analyses ({exc})")
    if latest is None:
        return LastAnalysis(why=f"no analysis of task {task_id} is on record in Temporal")
    inp = latest.input
    proposed = latest.result.root_cause if latest.result is not None else None
    if inp.task_data:
        return LastAnalysis(inp.task_data, proposed)
    if inp.source_path:  # a batch's analysis reads its task file in the worker; read the same file here
        try:
            return LastAnalysis(read_task_file(inp.source_path), proposed)
        except TaskFileError as exc:
            return LastAnalysis(proposed=proposed, why=f"its last analysis read a task file this machine cannot read ({exc})")
    return LastAnalysis(proposed=proposed, why=f"the last analysis of task {task_id} carries no task data")


def task_clue_keys(settings: Settings, task: dict[str, Any]) -> list[str]:
    routed = extract_clues(task, settings.pseudonym_key.get_secret_value().encode())
    return sorted({clue_key(c.kind, c.name) for c in routed.clues})


def feedback(
    task_id: int = typer.Argument(..., help="jediTaskID the diagnosis was about"),
    correct: bool = typer.Option(None, "--correct/--wrong", help="Was the diagnosis right?"),
    cause: str = typer.Option(..., "--cause", help="The true cause (the diagnosed one with --correct)"),
    proposed: str = typer.Option(None, "--proposed", help="With --wrong: the cause the analysis proposed"),
    operator: str = typer.Option(None, "--operator", help="Who gives this verdict"),
    new_cause: bool = typer.Option(False, "--new-cause",
                                   help="The cause is new to the knowledge base (otherwise an unknown cause is refused)"),
    task_data: Path = typer.Option(None, "--task-data",
                                   help="The task's JSON (default: what its last analysis read, from Temporal)"),
    as_json: bool = typer.Option(False, "--json", help="the receipt as JSON (what was recorded and whether it counts "
                                                       "for similar tasks)"),
) -> None:
    """Confirm or correct a diagnosis: it decides the task's next analysis and ranks the cause higher for
    tasks with the same clues."""
    if correct is None:
        fail("say whether the diagnosis was right: --correct or --wrong")
    from bamboo.analysis.feedback import UnknownCause, record_feedback
    from bamboo.cli.store_access import opened_store
    from bamboo.store import StoreNotConfigured

    settings = get_settings()
    needs_temporal = task_data is None or (not correct and proposed is None)
    last = run(last_analysis(settings, task_id)) if needs_temporal else LastAnalysis()
    task, why = last.task, last.why
    if task_data is not None:
        try:
            task, why = read_task_file(task_data), ""
        except TaskFileError as exc:
            fail(f"{exc}; pass the task's JSON (or an incident file) with --task-data")
            raise
        if task.get("jediTaskID") not in (None, task_id):
            fail(f"{task_data} is task {task.get('jediTaskID')}, not {task_id}; pass the file of task {task_id}")
    clues = task_clue_keys(settings, task) if task else []
    if task and not clues:
        why = "the task's data has no clue analysis can use"
    if not correct and proposed is None:
        proposed = last.proposed
        if proposed is None and clues:
            clues, why = [], ("what the analysis proposed is not known (no finished analysis of the task in "
                              "Temporal); pass --proposed CAUSE")
    try:
        item = Feedback(task_id=task_id, verdict="correct" if correct else "wrong", cause=cause,
                        proposed_cause=proposed, operator=operator, clues=clues)
    except ValueError as exc:
        fail(f"invalid feedback: {exc}")
        raise

    async def go():
        async with opened_store(settings) as store:
            return await record_feedback(store.pool, item, new_cause=new_cause)

    try:
        receipt = run(go())
    except (StoreNotConfigured, ConnectionError, UnknownCause) as exc:
        fail(str(exc))
        raise
    if as_json:
        print(json.dumps({**receipt.model_dump(mode="json"), "counts_for_similar_tasks": bool(receipt.clues),
                          "why_not": "" if receipt.clues else why}))
        return
    # The cause's name is stored text (a model may have written it): shown inert, never as markup.
    cause_shown = inert_markup(receipt.cause, one_line=True)
    known = "" if receipt.matched_known_cause else " [yellow](not a cause the knowledge base knows yet)[/]"
    console.print(f"Recorded: task {receipt.task_id} {receipt.verdict}, cause [bold]{cause_shown}[/]{known}; "
                  f"it now counts {receipt.cause_frequency} incidents ({receipt.cause_confirmations} confirmed).")
    if receipt.clues:
        console.print(f"It counts for tasks sharing this task's {receipt.clues} clues, as one more incident of "
                      f"{cause_shown}.")
    else:
        console.print(f"[yellow]It decides only task {task_id}'s next analysis: {inert_markup(why, one_line=True)}; "
                      "pass --task-data FILE so it also counts for similar tasks.[/]")


def register(app: typer.Typer) -> None:
    app.command("feedback")(feedback)
