"""A workflow that calls the policy inside Temporal's workflow sandbox (used by test_workflow_sandbox).

It imports the policy modules the normal way, without passing them through, so the sandbox's import and
determinism restrictions apply to them exactly as they will in the Investigation workflow.
"""

from __future__ import annotations

from temporalio import workflow

from policy.approvers import ApproverRules
from policy.decisions import DecisionVerdict, OperatorDecision, PendingReview, validate_decision
from policy.review import ReviewDecision, ReviewRequest, decide_review
from policy.revocation import RevocationPlan, plan_revocation


@workflow.defn(sandboxed=True)
class PolicyProbeWorkflow:
    @workflow.run
    async def run(
        self, request: ReviewRequest, pending: PendingReview, decision: OperatorDecision, rules: ApproverRules
    ) -> tuple[ReviewDecision, DecisionVerdict, RevocationPlan]:
        verdict = validate_decision(pending, decision, rules)
        plan = plan_revocation("all", request.session_policies, request.grants)
        return decide_review(request), verdict, plan
