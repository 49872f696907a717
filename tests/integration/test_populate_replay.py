"""Today's workflow code replays the histories it writes today: a populate batch in slices (with an
escalated incident, a bad file and continue-as-new), one with a workflow per incident, and an
escalated incident's own AccumulateIncident. Each history is recorded in the test and replayed with
Temporal's `Replayer`, which fails on any nondeterminism (a workflow that decides differently when
it runs again).

No history from older code is kept: nothing has been released yet (docs/versioning.md). From the
first tagged release on, CI replays that release's recorded histories against the new code too.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from bamboo.accumulation import contract
from bamboo.accumulation.contract import PopulateInput, PopulateResult
from bamboo.contract import Queue
from tests.support.answers import accumulation_handler, reject
from tests.support.scripted_llm import schema_router
from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch

TASK = {"status": "failed", "errorDialog": "reason=WalltimeExceeded job hit limit", "processingType": "simul",
        "coreCount": 1}
EMAIL = "From: shifter\nThe jobs failed due to too short walltime. We increased the walltime and resubmitted."


def _write(d: Path, n: int) -> Path:
    d.mkdir()
    for i in range(n):
        (d / f"{i:03d}.json").write_text(json.dumps(
            {"incident_id": f"replay-{i}", "task_data": {**TASK, "jediTaskID": 43000000 + i}, "email_text": EMAIL}))
    (d / "bad.json").write_text("{ not json")
    return d


async def _histories(client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of the workflow (continue-as-new starts a new run with its own history)."""
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    return [await client.get_workflow_handle(workflow_id, run_id=r.run_id).fetch_history() for r in runs]


async def _replay(histories: list[WorkflowHistory], *workflows: type, **options) -> None:
    replayer = Replayer(workflows=list(workflows or (PopulateBatch, AccumulateIncident)),
                        data_converter=pydantic_data_converter, **options)
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
        assert result.replay_failure is None


async def _batch(client, path: Path, **extra) -> tuple[str, PopulateResult]:
    bid = f"replay-{uuid.uuid4().hex[:8]}"
    result = await client.execute_workflow(
        PopulateBatch.run, PopulateInput(batch_id=bid, path=str(path), **extra),
        id=contract.batch_workflow_id(bid), task_queue=Queue.MAIN, result_type=PopulateResult)
    return contract.batch_workflow_id(bid), result


async def test_a_batch_in_slices_with_an_escalation_and_continue_as_new_replays(client, running_worker, llm_server,
                                                                              tmp_path):
    reviews = {"n": 0}

    def first_rejected(request):
        reviews["n"] += 1
        return reject(request) if reviews["n"] == 1 else accumulation_handler()(request)

    plan = {"code": "return {'checked': 'walltime'}", "capability_gaps": []}
    llm_server.handler = schema_router({"analysis_exploration_code": lambda r: plan, "review_verdict": first_rejected},
                                       default=accumulation_handler())
    workflow_id, result = await _batch(client, _write(tmp_path / "in", 9), concurrency=8, chunk_size=3,
                                       continue_as_new_every=6, max_review_retries=1)
    assert (result.done, result.failed, result.escalated) == (9, 1, 1), result.failures
    histories = await _histories(client, workflow_id)
    assert len(histories) >= 2, "the batch was to continue as new"
    child = [f async for f in client.list_workflows(f'WorkflowId STARTS_WITH "accumulate:{result.batch_id}:"')]
    assert len(child) == 1
    await _replay(histories + await _histories(client, child[0].id))


async def test_a_batch_with_one_workflow_per_incident_replays(client, running_worker, llm_server, tmp_path):
    workflow_id, result = await _batch(client, _write(tmp_path / "in", 3), concurrency=2,
                                       one_workflow_per_incident=True)
    assert (result.done, result.failed) == (3, 1)
    children = [h for i in range(4) for h in await _histories(client, contract.escalation_workflow_id(result.batch_id, i))]
    assert len(children) == 4
    await _replay(await _histories(client, workflow_id) + children)


@workflow.defn(name=contract.POPULATE_WORKFLOW)
class _ReorderedBatch:
    """A 'changed' PopulateBatch that reads a page before it lists: not what the history recorded."""

    @workflow.run
    async def run(self, inp: PopulateInput) -> PopulateResult:
        await workflow.execute_activity(contract.read_incident_sources,
                                        contract.SourcePageInput(ref="x", offset=0, limit=1),
                                        **contract.LISTING_PAGE.options())
        raise AssertionError("unreachable on replay")


async def test_the_replay_catches_a_workflow_that_decides_differently(client, running_worker, llm_server, tmp_path):
    """The replay tests above can fail: the same history against a reordered workflow is refused."""
    workflow_id, _ = await _batch(client, _write(tmp_path / "in", 2), concurrency=2)
    with pytest.raises(Exception, match="(?i)nondetermin"):
        # Unsandboxed: the sandbox would refuse to re-import this test module, not the history.
        await _replay(await _histories(client, workflow_id), _ReorderedBatch, AccumulateIncident,
                      workflow_runner=UnsandboxedWorkflowRunner())
