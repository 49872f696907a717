"""The accumulate workflow's review paths, on the real stack: rejection → best stored with a
warning and exploration recorded as unavailable; a human-only gap → a human-input request; a broken
reviewer → fail-open, recorded."""

from __future__ import annotations

import json
import uuid

import pytest

from bamboo.accumulation.contract import AccumulateInput, AccumulateResult
from bamboo.models.incident import IncidentSource
from temporalio.client import WorkflowFailureError

from tests.support.answers import accumulation_handler, reject
from tests.support.scripted_llm import Reply, schema_router
from workflows.accumulate import AccumulateIncident
from bamboo.contract import Queue

TASK = {"jediTaskID": 40999001, "status": "failed", "errorDialog": "reason=WalltimeExceeded job hit limit",
        "processingType": "simul", "coreCount": 1}
EMAIL = ("From: shifter\nThe jobs failed due to too short walltime for the simulation step. "
         "We increased the walltime and resubmitted.")


async def _accumulate(client, tmp_path, incident: dict) -> AccumulateResult:
    f = tmp_path / f"{uuid.uuid4().hex}.json"
    f.write_text(json.dumps(incident))
    return await client.execute_workflow(
        AccumulateIncident.run, AccumulateInput(source=IncidentSource(path=str(f)), max_review_retries=2),
        id=f"accumulate:test:{uuid.uuid4().hex[:8]}", task_queue=Queue.MAIN,
    )


def _with_explorer(plan: dict):
    base = accumulation_handler(review=reject)
    return schema_router({"analysis_exploration_code": lambda r: plan}, default=base)


async def test_rejected_every_time_explores_once_then_stores_best_with_warning(client, running_worker, services,
                                                                               llm_server, tmp_path):
    code = "return {'checked': 'walltime', 'n': 2 + 2}"
    llm_server.handler = _with_explorer({"code": code, "capability_gaps": []})
    result = await _accumulate(client, tmp_path, {"incident_id": "rej", "task_data": TASK, "email_text": EMAIL})
    assert result.approved is False and result.attempts == 3
    assert result.exploration.startswith("ran: 0 tool call(s), sandbox ok"), result.exploration
    assert llm_server.counts_by_schema()["analysis_exploration_code"] == 1, "the explorer fires exactly once"
    assert any("stored the best of 3 attempts" in w for w in result.warnings)
    assert llm_server.counts_by_schema()["review_verdict"] == 3
    view = await services.store.knowledge.graph_view(result.graph_id)
    assert view is not None and any("stored the best" in w for w in view["warnings"])
    # the rejection feedback reached the re-extraction prompt
    extraction_prompts = [c.first_user for c in llm_server.calls if c.schema_name == "email_extraction"]
    assert len(extraction_prompts) == 3 and "reviewer_feedback" in extraction_prompts[1]
    # what the sandboxed code returned reached the re-extraction
    assert '"checked": "walltime"' in extraction_prompts[1] and '"n": 4' in extraction_prompts[1]


async def test_explorer_that_cannot_plan_fails_the_incident(client, running_worker, llm_server, tmp_path):
    llm_server.handler = _with_explorer({"code": "", "capability_gaps": []})
    with pytest.raises(WorkflowFailureError) as err:
        await _accumulate(client, tmp_path, {"incident_id": "noplan", "task_data": TASK, "email_text": EMAIL})
    assert "neither investigation code nor a capability gap" in str(err.value.cause.cause)


async def test_explorer_state_changing_plan_is_refused_not_run(client, running_worker, llm_server, tmp_path):
    llm_server.handler = _with_explorer({"code": "await tools.kill_task(task_id=40999001)\nreturn {}",
                                         "capability_gaps": []})
    result = await _accumulate(client, tmp_path, {"incident_id": "kill", "task_data": TASK, "email_text": EMAIL})
    assert result.exploration.startswith("refused: automatic_state_changing"), result.exploration


async def test_missing_procedure_becomes_human_request_and_batch_item_succeeds(client, running_worker, services, tmp_path):
    incident = {"incident_id": "noproc", "task_data": TASK,
                "resolution_record": {"cause": "Walltime too short for simulation", "resolution": "Increase walltime",
                                      "procedure": []}}
    result = await _accumulate(client, tmp_path, incident)
    assert result.human_requests == ["no investigation procedure captured"]
    assert (await services.store.knowledge.stats()).human_requests_open == 1


async def test_reviewer_malfunction_fails_open_and_is_recorded(client, running_worker, llm_server, tmp_path):
    llm_server.handler = accumulation_handler(review=lambda r: Reply.text("not json at all"))
    result = await _accumulate(client, tmp_path, {"incident_id": "broken-reviewer", "task_data": TASK, "email_text": EMAIL})
    assert result.approved is True
    assert result.reviewer_error and "review_verdict" in result.reviewer_error
    assert any("fail-open" in w for w in result.warnings)
