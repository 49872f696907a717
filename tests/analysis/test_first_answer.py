"""The ranking's answer first, the model within the starter's deadline, and who decided (issue 30, items 2 and 3).

The model's speed is scripted (the scripted server answers after a delay) and the deadlines are scaled down
to seconds: what is asserted is what the result says and which timeout the workflow gave the model step,
never how long anything took."""

from __future__ import annotations

import uuid
from datetime import timedelta


from bamboo.analysis.contract import AnalysisResult, AnalyzeInput, Feedback, analyze_workflow_id
from bamboo.analysis.feedback import record_feedback
from bamboo.analysis.provenance import provenance
from bamboo.analysis.service import AnalysisService
from bamboo.cli.analyze_cmd import analyze_once
from bamboo.contract import Queue
from tests.analysis.answers import analysis_handler, email_text, pick_top
from tests.support.scripted_llm import Reply
from workflows.analyze import AnalyzeTask



def slow(delay_s: float):
    """The scripted model, answering every diagnosis and e-mail call after `delay_s`."""
    top = pick_top()
    return analysis_handler(diagnose=lambda r: Reply.json(top(r), delay_s=delay_s),
                            email=lambda r: Reply.text(email_text(r), delay_s=delay_s))


async def model_step_timeouts(handle) -> list[tuple[timedelta, timedelta]]:
    """(start-to-close, schedule-to-close) of every diagnosis step the workflow scheduled."""
    found = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "analysis_diagnose":
                found.append((attrs.start_to_close_timeout.ToTimedelta(),
                              attrs.schedule_to_close_timeout.ToTimedelta()))
    return found


async def test_a_model_slower_than_the_old_fixed_limit_is_waited_for_when_the_setting_allows_it(
        learned, analysis_client, llm):
    """A 10-minute setting gives the model step 10 minutes (the fixed 5 minutes cut a slower model off and
    retried it six times); the delayed answer is waited for and decides the second opinion."""
    llm.handler = slow(1.5)
    task = dict(learned[4].task_data)
    handle = await analysis_client.start_workflow(
        AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=0.0, model_deadline_s=600),
        id=f"{analyze_workflow_id(task['jediTaskID'], task['status'])}:{uuid.uuid4().hex[:6]}", task_queue=Queue.MAIN)
    result = await handle.result()
    assert await model_step_timeouts(handle) == [(timedelta(minutes=10), timedelta(minutes=10))]
    assert result.diagnosis_source == "llm" and result.model_status == "consulted", result.steps
    assert result.model_proposal is not None and result.model_proposal.verdict == "agreed"


async def test_a_short_deadline_returns_the_rankings_answer_first_and_says_the_slow_model_was_skipped(
        learned, analysis_client, llm):
    """The first answer (ranking, stored resolution, deterministic draft) reaches the client while the model
    is pending; the model, slower than the deadline, is asked once and not again, and the result says so."""
    llm.handler = slow(30)
    llm.reset()
    task = dict(learned[4].task_data)  # one the ranking names a cause for (the sixth's pilot code is unstored)
    firsts: list[AnalysisResult] = []
    result = await analyze_once(analysis_client, task, 0.0, deadline_s=2, on_first=firsts.append)

    [first] = firsts
    assert first.answer == "first" and first.model_status == "pending" and first.email_content
    assert first.root_cause == first.candidates[0].name and first.resolution == result.resolution
    assert result.diagnosis_source == "ranking" and result.model_proposal is None, result.steps
    assert result.root_cause == result.candidates[0].name and result.cause_source == "ranking"
    assert llm.counts_by_schema().get("analysis_diagnosis") == 1, llm.counts_by_schema()  # not retried
    assert llm.counts_by_schema().get(None) is None, "the e-mail was not asked of a model known to be too slow"
    assert result.email_source == "template"
    assert result.answer == "final" and result.model_status == "too_slow" and result.model_deadline_s == 2
    assert {s.step: s.status for s in result.steps}["llm_diagnosis"] == "too_slow"
    assert "the model was skipped: it did not answer within the 2 s deadline" in provenance(result).chosen_by


async def test_an_operators_correction_is_reported_as_the_operators_decision(
        learned, analysis_client, analysis_services, llm):
    """After a correction the result says an operator corrected the task (not "confirmed", not the ranking)."""
    task = dict(learned[3].task_data)
    pool = analysis_services.store.pool
    before = await AnalysisService(analysis_services).gather_evidence(task)
    runner_up = before.candidates[1].name
    await record_feedback(pool, Feedback(task_id=task["jediTaskID"], verdict="wrong", cause=runner_up,
                                         proposed_cause=before.candidates[0].name))
    try:
        result = await analysis_client.execute_workflow(
            AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=0.0, model_deadline_s=60),
            id=f"{analyze_workflow_id(task['jediTaskID'], task['status'])}:{uuid.uuid4().hex[:6]}",
            task_queue=Queue.MAIN)
    finally:
        async with pool.connection() as conn:
            await conn.execute("DELETE FROM analysis_feedback WHERE task_id = %s", (task["jediTaskID"],))
    said = provenance(result)
    assert result.cause_source == "operator" and result.operator_verdict == "corrected"
    assert said.decided_by == "operator_correction"
    assert said.chosen_by.startswith(f"an operator, who corrected this task's analysis to {runner_up}")
    assert said.confidence.startswith("1.00 (operator's verdict on this task; ranking confidence")
    assert not any("an operator confirmed" in n for n in result.notes), result.notes
