"""A workflow that calls the policy inside Temporal's workflow sandbox (used by test_workflow_sandbox).

It imports the policy modules the normal way, without passing them through, so the sandbox's import and
determinism restrictions apply to them exactly as they will in the Investigation workflow.
"""

from __future__ import annotations

from temporalio import workflow

from datetime import datetime

from policy.approvers import DeploymentPolicy
from policy.decisions import DecisionVerdict, OperatorDecision, PendingReview, validate_decision
from policy.review import ReviewDecision, ReviewRequest, decide_review
from policy.revocation import RevocationPlan, plan_revocation


@workflow.defn(sandboxed=True)
class PolicyProbeWorkflow:
    @workflow.run
    async def run(
        self, request: ReviewRequest, pending: PendingReview, decision: OperatorDecision, policy: DeploymentPolicy,
        now: datetime,
    ) -> tuple[ReviewDecision, DecisionVerdict, RevocationPlan]:
        # The signature check (Ed25519 through cryptography) runs here, inside the sandbox, as it does in
        # the Investigation workflow.
        verdict = validate_decision(pending, decision, policy, now=now)
        plan = plan_revocation("all", request.session_policies, request.grants)
        return decide_review(request), verdict, plan
