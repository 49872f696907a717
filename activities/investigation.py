"""Side effects of the Investigation workflow: LLM steps, the policy's inputs, grants, audit, finalize.

Thin: each activity unpacks its model and calls a collaborator the worker built and handed in
(``worker/wiring.py``). Audit rows carry dedup keys derived from the workflow's own counters, so a
retried activity never writes a row twice. The sandbox activity registered here is the sandbox's own
``execute_code``, given a tool caller that also serves ``proc__…`` procedure tools (refreshed from the
store before every run).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from activities.llm_errors import as_activity_error
from activities.sandbox import SandboxActivities
from bamboo.approvals.registry import ApproverRegistry
from bamboo.audit import AuditEvent, AuditSink, BlobSink
from bamboo.contract import Queue, implements
from bamboo.investigation import contract
from bamboo.investigation.contract import (
    AuditBatch, CodegenInput, CodegenResult, FinalizeInput, FinalizeResult, GrantInput, IntentInput,
    IntentResult, PolicyContext, PolicyContextInput, ProcedureRun, ReuseCandidates, ReuseQuery, RevokeGrantsInput,
    SummaryInput, SummaryResult, WrittenProcedures, WrittenQuery, workflow_id,
)
from bamboo.investigation.finalize import Finalizer
from bamboo.investigation.procedure_tools import (
    REFRESH_BUDGET_S, PinnedProcedures, ProcedureToolCaller, policy_catalog,
)
from bamboo.investigation.reuse import ProcedureMatcher
from bamboo.investigation.turns import TurnModel
from bamboo.investigation.written import WrittenProcedureReader
from bamboo.llm.metering import SpendMeter
from bamboo.offload import in_thread
from bamboo.sandbox import contract as sandbox
from bamboo.sandbox.contract import ExecuteCodeInput, SandboxRunResult
from bamboo.sandbox.runner import SandboxRunner
from bamboo.store.first_claims import SessionIds, UsedDecisions
from bamboo.tools.model import ToolCaller
from bamboo.tools.selection import ToolSelector
from policy.approvers import ApprovalRules
from policy.grants import grant_is_signed, grant_terms
from policy.procedures import procedure_scope


class InvestigationActivities:
    """Everything here is built by the worker; the rules and the registry are the deployment's."""

    def __init__(self, *, tools: ProcedureToolCaller, selector: ToolSelector, model: TurnModel, finalizer: Finalizer,
                 registry: ApproverRegistry, audit_log: AuditSink, approval_rules: ApprovalRules,
                 allow_mutating_autorun: bool, meter: SpendMeter, matcher: ProcedureMatcher,
                 written: WrittenProcedureReader, session_ids: SessionIds) -> None:
        self.tools = tools
        self.session_ids = session_ids
        self.repository = tools.repository
        self.selector = selector
        self.model = model
        self.finalizer = finalizer
        self.registry = registry
        self.audit_log = audit_log
        self.approval_rules = approval_rules
        self.allow_mutating_autorun = allow_mutating_autorun
        self.meter = meter
        self.matcher = matcher
        self.written = written

    async def _llm(self, work):
        """A model step: its failures as Temporal errors, its token usage priced into the result's ``spend``."""
        with as_activity_error():
            return await self.meter.step(with_heartbeats(work))

    @implements(contract.intent)
    async def intent(self, inp: IntentInput) -> IntentResult:
        return await self._llm(self.model.intent(inp))

    @implements(contract.codegen)
    async def codegen(self, inp: CodegenInput) -> CodegenResult:
        await self.tools.refresh()
        return await self._llm(self.model.code(inp, self.tools.list_tools()))

    @implements(contract.summary)
    async def summary(self, inp: SummaryInput) -> SummaryResult:
        if inp.status == "ok" and inp.tools_called:
            # Every run in the interactive loop was approved by a human (now, or by their auto-run choice):
            # it seeds tool selection's second source for similar requests later.
            await self.selector.record_approved_run(inp.request, inp.tools_called, ended_in_cause=False)
        return await self._llm(self.model.summary(inp))

    @implements(contract.policy_context)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        """The live catalogue, grants and this deployment's approval policy (the worker's rules and registry,
        never the client's); the decision itself is made, deterministically, in the workflow. A grant is a row
        anyone with the store's role can write: only those an approver's signature vouches for are handed on
        (checked off the event loop)."""
        if inp.predecessor is not None:
            await self._check_predecessor(inp.session_id, inp.predecessor)
        session_run = await self.session_ids.claim(inp.session_id, inp.run)
        await self.tools.refresh()
        stored_code = self.tools.procedure_code
        listed = self.tools.list_tools()
        # Only the bodies this decision reaches: the whole store in every context outgrew the payload limit.
        code = await in_thread(procedure_scope, inp.codes, inp.procedures, stored_code, [s.name for s in listed],
                               budget_s=REFRESH_BUDGET_S, what="finding the procedures a decision reaches")
        policy = await self.registry.policy(self.approval_rules)
        stored = await self.repository.grants()
        now = datetime.now(UTC)
        grants = await asyncio.to_thread(
            lambda: {name: g for name, g in stored.items() if grant_is_signed(g, policy, now)})
        current = await asyncio.to_thread(grant_terms, code, code)  # what a review would offer: current code only
        return PolicyContext(
            session_run=session_run, catalog=policy_catalog(listed, code), stored_procedures=sorted(stored_code),
            grants=grants,
            granted_code=await self.repository.versions(sorted({g.code_hash for n, g in grants.items() if n in code})),
            exposed_procedures=self.tools.exposed,  # judged off the loop by the refresh above
            policy=policy,
            withheld_grants=await self.repository.withheld(list(current), now),
        )

    async def _check_predecessor(self, session_id: str, run: str) -> None:
        """Refuse a run continued from anything but an investigation on our queue. Any workflow can continue-as-new
        into ours, with the memo, the carried state and the start delay it likes: a requester's own workflow handed
        a real session an inbox of unsigned messages under another's name (she approved her own kill as "their"
        request), or published a review key the real run then had (the key names the chain's first run). Only our
        workers run our type on our queue, and each run checks the one it continues when it starts, so the chain
        holds nothing but our state. The run it continues has just ended, so the server still describes it."""
        desc = await activity.client().get_workflow_handle(workflow_id(session_id), run_id=run).describe()
        if desc.workflow_type != contract.WORKFLOW_NAME or desc.task_queue != Queue.MAIN:
            raise ApplicationError(f"session {session_id} continues a run that was not an investigation on this "
                                   "deployment's queue; nothing is decided in it", type=contract.FOREIGN_PREDECESSOR,
                                   non_retryable=True)

    @implements(contract.reuse_candidates)
    async def reuse_candidates(self, inp: ReuseQuery) -> ReuseCandidates:
        """What the reuse step chooses from; the choice is the workflow's (``policy.reuse``)."""
        await self.tools.refresh()
        with as_activity_error():  # an embedder failure is reported like a model's
            return await self.matcher.candidates(inp)

    @implements(contract.written_procedures)
    async def written_procedures(self, inp: WrittenQuery) -> WrittenProcedures:
        """What ``/codify`` may turn into code; the choice and the code's review are the workflow's."""
        with as_activity_error():  # an embedder failure is reported like a model's
            return await self.written.for_session(inp)

    @implements(contract.procedure_ran)
    async def procedure_ran(self, inp: ProcedureRun) -> bool:
        return await self.repository.record_run(inp.procedure, inp.code_hash, inp.at, inp.status)

    @implements(contract.audit)
    async def audit(self, batch: AuditBatch) -> int:
        written = 0
        for record in batch.records:
            seq = await self.audit_log.append(
                AuditEvent(kind=record.kind, actor=record.actor, run_id=f"investigate:{batch.session_id}",
                           body=record.body),
                dedup_key=record.dedup_key,
            )
            written += seq is not None
        return written

    @implements(contract.grant)
    async def grant(self, inp: GrantInput) -> list[str]:
        """Persist durable grants; each is audited with who granted it, when, and the code hash it binds."""
        granted = []
        for grant in inp.grants:
            if await self.repository.is_revoked(grant):
                continue  # revoked recently: this answer could be one signed before (policy.grants.revocation_of)
            if await self.repository.set_grant(grant):
                granted.append(grant.procedure)
                await self.audit_log.append(
                    AuditEvent(kind="procedure_grant_created", actor=grant.granted_by,
                               run_id=f"investigate:{inp.session_id}",
                               body={"procedure": grant.procedure, "code_hash": grant.code_hash,
                                     "granted_at": grant.granted_at.isoformat(), "turn": inp.turn}),
                    dedup_key=f"grant:{inp.session_id}:{inp.turn}:{grant.procedure}:{grant.code_hash}",
                )
        return granted

    @implements(contract.revoke_grants)
    async def revoke_grants(self, inp: RevokeGrantsInput) -> list[str]:
        revoked = [g.procedure for g in inp.grants if await self.repository.clear_grant(g)]
        if inp.whole or inp.every:
            await self.repository.revoke_whole(inp.whole, inp.every)
            revoked = sorted({*revoked, *inp.whole})
        await self.audit_log.append(
            AuditEvent(kind="procedure_grant_revoked", actor=inp.actor, run_id=f"investigate:{inp.session_id}",
                       body={"requested": [g.procedure for g in inp.grants], "revoked": revoked,
                             "whole": inp.whole, "every": inp.every}),
            dedup_key=inp.dedup_key,
        )
        return revoked

    @implements(contract.finalize)
    async def finalize(self, inp: FinalizeInput) -> FinalizeResult:
        result = await with_heartbeats(self.finalizer.finalize(inp))
        await self.audit_log.append(
            AuditEvent(kind="investigation_finalized", actor=inp.actor, run_id=f"investigate:{inp.session_id}",
                       body={"outcome": inp.outcome, **result.model_dump()}),
            dedup_key=f"finalize:{inp.session_id}",
        )
        return result


class ProcedureSandboxActivities(SandboxActivities):
    """The sandbox's ``execute_code``, with the procedure snapshot refreshed before each run."""

    def __init__(self, *, runner: SandboxRunner, tools: ProcedureToolCaller, audit: AuditSink, blobs: BlobSink,
                 used_decisions: UsedDecisions | None = None) -> None:
        super().__init__(runner=runner, caller=tools, audit=audit, blobs=blobs, used_decisions=used_decisions)
        self.tools = tools

    @implements(sandbox.execute_code)
    async def execute_code(self, inp: ExecuteCodeInput) -> SandboxRunResult:
        await self.tools.refresh()
        return await SandboxActivities.execute_code(self, inp)

    def caller_for(self, inp: ExecuteCodeInput) -> ToolCaller | None:
        """A run whose decision saw stored procedures replays exactly those bodies (``PinnedProcedures``)."""
        return (PinnedProcedures(self.tools, inp.procedure_hashes, inp.tool_names or None)
                if inp.procedure_hashes else None)
