"""The policy runs unchanged inside Temporal's workflow sandbox, with pydantic payloads both ways."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from worker.registry import workflow_runner

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bamboo.approvals.keys import LocalKey
from policy.approvers import DeploymentPolicy, RegisteredKey, Role
from policy.catalog import ToolCatalog, ToolFacts
from policy.decisions import DecisionKind, DecisionVerdict, OperatorDecision, PendingReview
from policy.grants import make_grant
from policy.phases import Phase
from policy.review import ReviewDecision, CodeVerdict, ReviewReason, ReviewRequest, decide_review
from policy.revocation import RevocationPlan
from policy.signing import DEFAULT_DEPLOYMENT, StatementKind
from tests.policy.sandbox_workflow import PolicyProbeWorkflow

pytestmark = pytest.mark.temporal



async def test_policy_decides_inside_the_workflow_sandbox(temporal_server: WorkflowEnvironment) -> None:
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
    assert (expected.outcome, expected.reason) == (CodeVerdict.RUN, ReviewReason.DURABLE_GRANT)
    pending = PendingReview(session_id="s", turn=1, code_hash=expected.code_hash, requester="requester", read_only=True)
    key = LocalKey("x", Ed25519PrivateKey.generate())
    policy = DeploymentPolicy(approvers=(RegisteredKey(identity="x", public_key=key.public_key,
                                                        roles=frozenset({Role.APPROVE})),))
    now = datetime.now(timezone.utc)
    decision = OperatorDecision(turn=1, code_hash=expected.code_hash, kind=DecisionKind.RUN_ONCE, approver="x")
    decision = decision.model_copy(update={"auth": key.authorize(StatementKind.DECISION, "s", decision.signed_body(),
                                                                 now=now, deployment=DEFAULT_DEPLOYMENT)})
    forged = decision.model_copy(update={"auth": decision.auth.model_copy(update={"signature": "A" * 88})})

    client: Client = temporal_server.client
    queue = f"policy-{uuid.uuid4()}"
    # The worker's own runner: cryptography's compiled core is passed through the sandbox (a forged
    # signature made it import its exception type inside the sandbox and abort the process).
    async with Worker(client, task_queue=queue, workflows=[PolicyProbeWorkflow], workflow_runner=workflow_runner()):
        results = [await client.execute_workflow(
            PolicyProbeWorkflow.run,
            args=[request, pending, answer, policy, now],
            id=f"policy-probe-{uuid.uuid4()}",
            task_queue=queue,
            result_type=tuple[ReviewDecision, DecisionVerdict, RevocationPlan],
        ) for answer in (decision, forged)]
    (decided, verdict, plan), (_, forged_verdict, _) = results
    assert decided == expected
    assert verdict.accepted and verdict.signed
    assert forged_verdict.refusal is not None and forged_verdict.refusal.value == "bad_signature"
    assert plan.procedures == ("proc__get_jobs__get_task",)
