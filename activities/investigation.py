"""Side effects of the Investigation workflow: LLM steps, the policy's inputs, grants, audit, finalize.

Thin: each activity unpacks its model and calls a service in ``bamboo.investigation``. Audit rows carry
dedup keys derived from the workflow's own counters, so a retried activity never writes a row twice.
The sandbox activity registered here is the sandbox's own ``execute_code``, given a tool caller that also
serves ``proc__…`` procedure tools (refreshed from the store before every run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from temporalio import activity

from activities.heartbeat import with_heartbeats
from activities.sandbox import EXECUTE_CODE, ExecuteCodeInput, ExecuteCodeOutput, SandboxActivities, runner_from_settings
from bamboo.approvals.registry import ApproverRegistry
from bamboo.audit import AuditEvent
from bamboo.investigation.finalize import Finalizer
from bamboo.investigation.procedure_tools import ProcedureToolCaller, exposed_procedures, policy_catalog
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.investigation.turns import TurnModel
from bamboo.llm.errors import LLMError, to_application_error
from bamboo.mcp.factory import build_tool_caller
from bamboo.models.investigation import (
    AuditBatch, CodegenInput, CodegenResult, FinalizeInput, FinalizeResult, GrantInput, IntentInput,
    IntentResult, PolicyContext, PolicyContextInput, RevokeGrantsInput, SummaryInput, SummaryResult,
)
from bamboo.sandbox.runner import SandboxRunner, SandboxUnavailable
from bamboo.services import Services
from bamboo.mcp.config import load_servers_config
from bamboo.store.vectors import PgVectorIndex
from bamboo.tools.selection import SelectionConfig, ToolSelector, config_namespace

from workflows.names import (
    INVESTIGATION_AUDIT as AUDIT,
    INVESTIGATION_CODEGEN as CODEGEN,
    INVESTIGATION_FINALIZE as FINALIZE,
    INVESTIGATION_GRANT as GRANT,
    INVESTIGATION_INTENT as INTENT,
    INVESTIGATION_POLICY_CONTEXT as POLICY_CONTEXT,
    INVESTIGATION_REVOKE_GRANTS as REVOKE_GRANTS,
    INVESTIGATION_SUMMARY as SUMMARY,
)

log = logging.getLogger(__name__)


def _servers_fingerprint(settings) -> str:
    if settings.mcp_servers_config is None:
        return "builtin-only"
    try:
        return load_servers_config(settings.mcp_servers_config).fingerprint()
    except Exception as exc:  # noqa: BLE001 — the composite client reports a bad config; selection still works
        log.warning("tool selection namespace falls back to the config path: %s", exc)
        return str(settings.mcp_servers_config)


class InvestigationActivities:
    def __init__(self, services: Services, tools: ProcedureToolCaller) -> None:
        self.s = services
        self.tools = tools
        self.repository = tools.repository
        # Vectors in pgvector, namespaced by the tool configuration and embedder, so differently configured
        # deployments sharing a database do not thrash each other's catalogue.
        namespace = config_namespace(_servers_fingerprint(services.settings), services.embedder.model_id,
                                     services.embedder.dim)
        settings = services.settings
        config = SelectionConfig(budget_margin=settings.tool_budget_margin,
                                 max_full_schemas=settings.tool_max_full_schemas,
                                 candidate_k=settings.tool_retrieval_candidate_k)
        self.selector = ToolSelector(PgVectorIndex(services.store.pool), services.embedder, namespace, config)
        self.model = TurnModel(services.llm, self.selector, settings.llm_context_window)
        self.finalizer = Finalizer(services.store.knowledge, self.repository, services.embedder,
                                   services.settings.canonical_match_threshold)
        self.registry = ApproverRegistry(services.store.pool, services.store.audit)

    async def _llm(self, work):
        try:
            return await with_heartbeats(work)
        except LLMError as exc:
            raise to_application_error(exc) from exc

    @activity.defn(name=INTENT)
    async def intent(self, inp: IntentInput) -> IntentResult:
        return await self._llm(self.model.intent(inp))

    @activity.defn(name=CODEGEN)
    async def codegen(self, inp: CodegenInput) -> CodegenResult:
        await self.tools.refresh()
        return await self._llm(self.model.code(inp, self.tools.list_tools()))

    @activity.defn(name=SUMMARY)
    async def summary(self, inp: SummaryInput) -> SummaryResult:
        if inp.status == "ok" and inp.tools_called:
            # Every run in the interactive loop was approved by a human (now, or by their auto-run choice):
            # it seeds tool selection's second source for similar requests later.
            await self.selector.record_approved_run(inp.request, inp.tools_called, ended_in_cause=False)
        return await self._llm(self.model.summary(inp))

    @activity.defn(name=POLICY_CONTEXT)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        """The live catalogue, grants and this deployment's approval policy (the worker's rules and registry,
        never the client's); the decision itself is made, deterministically, in the workflow."""
        await self.tools.refresh()
        code = self.tools.procedure_code
        raw = self.tools.raw_tools()
        grants = await self.repository.grants()
        settings = self.s.settings
        return PolicyContext(
            catalog=policy_catalog(self.tools.list_tools(), code),
            grants=grants,
            granted_code=await self.repository.versions(sorted({g.code_hash for g in grants.values()})),
            exposed_procedures=exposed_procedures(raw, code, settings.allow_mutating_autorun),
            policy=await self.registry.policy(settings.approval_rules()),
        )

    @activity.defn(name=AUDIT)
    async def audit(self, batch: AuditBatch) -> int:
        written = 0
        for record in batch.records:
            seq = await self.s.store.audit.append(
                AuditEvent(kind=record.kind, actor=record.actor, run_id=f"investigate:{batch.session_id}",
                           body=record.body),
                dedup_key=record.dedup_key,
            )
            written += seq is not None
        return written

    @activity.defn(name=GRANT)
    async def grant(self, inp: GrantInput) -> list[str]:
        """Persist durable grants; each is audited with who granted it, when, and the code hash it binds."""
        granted = []
        for grant in inp.grants:
            if await self.repository.set_grant(grant):
                granted.append(grant.procedure)
                await self.s.store.audit.append(
                    AuditEvent(kind="procedure_grant_created", actor=grant.granted_by,
                               run_id=f"investigate:{inp.session_id}",
                               body={"procedure": grant.procedure, "code_hash": grant.code_hash,
                                     "granted_at": grant.granted_at.isoformat(), "turn": inp.turn}),
                    dedup_key=f"grant:{inp.session_id}:{inp.turn}:{grant.procedure}:{grant.code_hash}",
                )
        return granted

    @activity.defn(name=REVOKE_GRANTS)
    async def revoke_grants(self, inp: RevokeGrantsInput) -> list[str]:
        revoked = [name for name in inp.procedures if await self.repository.clear_grant(name)]
        await self.s.store.audit.append(
            AuditEvent(kind="procedure_grant_revoked", actor=inp.actor, run_id=f"investigate:{inp.session_id}",
                       body={"requested": inp.procedures, "revoked": revoked}),
            dedup_key=inp.dedup_key,
        )
        return revoked

    @activity.defn(name=FINALIZE)
    async def finalize(self, inp: FinalizeInput) -> FinalizeResult:
        result = await with_heartbeats(self.finalizer.finalize(inp))
        await self.s.store.audit.append(
            AuditEvent(kind="investigation_finalized", actor=inp.actor, run_id=f"investigate:{inp.session_id}",
                       body={"outcome": inp.outcome, **result.model_dump()}),
            dedup_key=f"finalize:{inp.session_id}",
        )
        return result


class ProcedureSandboxActivities(SandboxActivities):
    """The sandbox's ``execute_code``, with the procedure snapshot refreshed before each run."""

    def __init__(self, *, runner: SandboxRunner, tools: ProcedureToolCaller, services: Services) -> None:
        super().__init__(runner=runner, caller=tools, audit=services.store.audit, blobs=services.store.blobs)
        self.tools = tools

    @activity.defn(name=EXECUTE_CODE)
    async def execute_code(self, inp: ExecuteCodeInput) -> ExecuteCodeOutput:
        await self.tools.refresh()
        return await SandboxActivities.execute_code(self, inp)


@dataclass
class InvestigationWiring:
    """What the worker registers: LLM-bound, store-bound and sandbox activities, on their own queues."""

    llm: list
    store: list
    sandbox: list


def build_investigation_activities(services: Services) -> InvestigationWiring:
    """Wire the activities once per worker. Without a usable sandbox interpreter this worker serves no
    ``execute_code`` (runs wait for a worker that has one) instead of refusing to start at all."""
    settings = services.settings
    try:
        runner = runner_from_settings(settings)
        services.closers.append(runner.close)  # pooled children must not outlive the worker
    except SandboxUnavailable as exc:
        log.error("this worker will not run sandboxed code: %s", exc)
        runner = None
    tools = ProcedureToolCaller(
        build_tool_caller(settings), ProcedureRepository(services.store.pool), runner,
        services.store.audit, services.store.blobs, allow_mutating_autorun=settings.allow_mutating_autorun,
    )
    acts = InvestigationActivities(services, tools)
    sandbox = [] if runner is None else [
        ProcedureSandboxActivities(runner=runner, tools=tools, services=services).execute_code]
    return InvestigationWiring(
        llm=[acts.intent, acts.codegen, acts.summary],
        store=[acts.policy_context, acts.audit, acts.grant, acts.revoke_grants, acts.finalize],
        sandbox=sandbox,
    )

