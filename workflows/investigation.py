"""Investigation: a long-lived, human-reviewed session (workflow id ``investigate:<session>``).

An operator message becomes a turn: intent → code generation → the trust policy's decision (computed
here, deterministically, from a catalogue and grants read by an activity) → if the policy asks, the
turn waits for a decision → sandboxed execution with exactly the allow-set the decision implies →
summary back to the operator. Waiting costs nothing and survives any worker restart: the decision
arrives as a signal (or an update, for UIs that want an answer) from any process, at any time.

A decision names the turn and code hash it answers; ``policy.decisions.validate_decision`` refuses a
stale turn, a different hash, a choice not offered, an approver not on the list, or self-approval of
state-changing code when a distinct approver is required. Signals that fail validation are recorded
in the transcript and audited; updates are refused by their validator before they enter history.

When the session opens on a task, a start-up hypothesis runs in the automatic phase: read-only
allow-set, stored procedures that would change state skipped and surfaced as suggestions.

Idle sessions expire (their procedures are kept as tentative); long sessions continue-as-new with
their whole state; ``BambooAwaitingApproval`` and ``BambooTaskId`` make pending reviews findable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from bamboo.investigation.code import with_task_preamble
    from bamboo.sandbox.models import SandboxRunResult
    from bamboo.models.investigation import (
        AbandonRequest, Ack, ApprovalsView, AuditBatch, AuditRecord, CapturedRun, CodegenInput, CodegenResult,
        FinalizeInput, FinalizeRequest, FinalizeResult, GrantInput, IntentInput, IntentResult, InvestigationResult,
        InvestigationStart, InvestigationState, OperatorMessage, PendingView, PolicyContext, PolicyContextInput,
        RevokeGrantsInput, RevokeRequest, SandboxRunRequest, SessionStatus, SummaryInput, SummaryResult,
        TRANSCRIPT_KEEP, TranscriptEntry,
    )
    from policy.code_identity import short_hash
    from policy.decisions import DecisionKind, DecisionVerdict, OperatorDecision, PendingReview, validate_decision
    from policy.grants import CodePolicy, make_grant, make_session_policy
    from policy.phases import Phase
    from policy.procedures import is_procedure_name
    from policy.review import ReviewDecision, ReviewOutcome, ReviewRequest, decide_review
    from policy.revocation import plan_revocation
    from workflows import names
    from workflows.common import AWAITING, HEARTBEAT, KIND, LLM_RETRY, STORE_RETRY, TASK_ID
    from workflows.queues import Queues


SANDBOX_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3,
                            non_retryable_error_types=["SandboxRetryRefused"])
MAX_STARTUP_REPLAYS = 3
MAX_RESULT_IN_TRANSCRIPT = 4000
HYPOTHESIS_REQUEST = "Form a first hypothesis of why this task failed, using read-only tools."


@workflow.defn(name=names.INVESTIGATION_WORKFLOW)
class Investigation:
    @workflow.init
    def __init__(self, inp: InvestigationStart) -> None:
        self._inp = inp
        self._st: InvestigationState = inp.carried.model_copy(deep=True) if inp.carried else InvestigationState()
        self._pending: PendingView | None = None
        self._review: PendingReview | None = None
        self._answer: OperatorDecision | None = None
        self._finalize: FinalizeRequest | None = None
        self._abandon: AbandonRequest | None = None
        self._outbox: list[AuditRecord] = []
        self._last_touch = workflow.now()

    # ------------------------------------------------------------------ queries
    @workflow.query
    def transcript(self, since: int = 0) -> list[TranscriptEntry]:
        return [e for e in self._st.transcript if e.seq > since]

    @workflow.query
    def pending(self) -> PendingView | None:
        return self._pending

    @workflow.query
    def approvals(self) -> ApprovalsView:
        return ApprovalsView(session_policies=dict(self._st.session_policies), grants=dict(self._st.grants))

    @workflow.query
    def status(self) -> SessionStatus:
        return self._st.status

    # ------------------------------------------------------------------ signals
    @workflow.signal(name="message")
    def message(self, msg: OperatorMessage) -> None:
        self._accept_message(msg)

    @workflow.signal(name="decide")
    def decide(self, decision: OperatorDecision) -> None:
        self._receive_decision(decision)

    @workflow.signal(name="revoke")
    def revoke(self, request: RevokeRequest) -> None:
        self._touch()
        self._st.revokes.append(request)

    @workflow.signal(name="finalize")
    def finalize(self, request: FinalizeRequest) -> None:
        self._touch()
        if self._finalize is None and self._abandon is None:
            self._finalize = request

    @workflow.signal(name="abandon")
    def abandon(self, request: AbandonRequest) -> None:
        self._touch()
        if self._finalize is None and self._abandon is None:
            self._abandon = request

    # ------------------------------------------------------------------ updates (same names, with answers)
    @workflow.update(name="message")
    def message_update(self, msg: OperatorMessage) -> Ack:
        self._accept_message(msg)
        return Ack(accepted=True, detail=f"queued as message {len(self._st.inbox)} in line")

    @message_update.validator
    def _validate_message(self, msg: OperatorMessage) -> None:
        self._require_open()

    @workflow.update(name="decide")
    def decide_update(self, decision: OperatorDecision) -> Ack:
        verdict = self._receive_decision(decision)
        return Ack(accepted=verdict.accepted, detail=verdict.detail, refusal=verdict.refusal)

    @decide_update.validator
    def _validate_decide(self, decision: OperatorDecision) -> None:
        verdict = validate_decision(self._review, decision, self._inp.rules)
        if not verdict.accepted:
            raise ApplicationError(verdict.detail, type=verdict.refusal.value if verdict.refusal else "refused")

    @workflow.update(name="revoke")
    def revoke_update(self, request: RevokeRequest) -> Ack:
        self.revoke(request)
        return Ack(accepted=True, detail="revocation queued; /approvals shows the result")

    @revoke_update.validator
    def _validate_revoke(self, request: RevokeRequest) -> None:
        # Planned against the grants this session last read; the signal path re-plans against fresh ones.
        plan = plan_revocation(request.target, self._st.session_policies, self._st.grants)
        if not plan.ok:
            raise ApplicationError(plan.error or "invalid revoke target", type="invalid_revoke_target")

    @workflow.update(name="finalize")
    def finalize_update(self, request: FinalizeRequest) -> Ack:
        self.finalize(request)
        return Ack(accepted=True, detail="finalizing")

    @finalize_update.validator
    def _validate_finalize(self, request: FinalizeRequest) -> None:
        self._require_open()

    @workflow.update(name="abandon")
    def abandon_update(self, request: AbandonRequest) -> Ack:
        self.abandon(request)
        return Ack(accepted=True, detail="abandoning")

    @abandon_update.validator
    def _validate_abandon(self, request: AbandonRequest) -> None:
        self._require_open()

    # ------------------------------------------------------------------ run
    @workflow.run
    async def run(self, inp: InvestigationStart) -> InvestigationResult:
        st = self._st
        attrs = [KIND.value_set("investigate"), AWAITING.value_set(False)]
        if inp.task_id is not None:
            attrs.append(TASK_ID.value_set(inp.task_id))
        workflow.upsert_search_attributes(attrs)
        if inp.carried is None:
            self._entry("system", f"session {inp.session_id} opened by {inp.requester}", actor=inp.requester)
            self._audit("investigation_started", inp.requester,
                        {"task_id": inp.task_id, "symptom": inp.symptom})
        else:
            st.continued += 1

        if inp.startup_hypothesis and inp.task_id is not None and not st.hypothesis_done:
            await self._guarded(self._startup_hypothesis())
            st.hypothesis_done = True

        while True:
            ready = await self._wait(lambda: bool(st.inbox) or self._closing())
            if not ready:
                return await self._close(SessionStatus.EXPIRED)
            if self._finalize is not None:
                return await self._close(SessionStatus.FINALIZED)
            if self._abandon is not None:
                return await self._close(SessionStatus.ABANDONED)
            message = st.inbox.pop(0)
            expired = await self._guarded(self._turn(message))
            self._touch()  # idleness is counted from the end of the last turn, not from its message
            if expired:
                return await self._close(SessionStatus.EXPIRED)
            if self._history_is_long():
                await self._flush()
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not (self._closing() or self._outbox or st.revokes):
                    workflow.continue_as_new(inp.model_copy(update={"carried": st}))

    # ------------------------------------------------------------------ one turn
    async def _turn(self, msg: OperatorMessage) -> bool:
        """Handle one operator message; True when the session expired while a review was waiting."""
        st = self._st
        st.turn += 1
        turn = st.turn
        self._entry("operator", msg.text, turn=turn, actor=msg.author)
        if not msg.force_tool:
            intent = await self._llm(names.INVESTIGATION_INTENT,
                                     IntentInput(session_id=self._inp.session_id, text=msg.text, recent=self._recent()),
                                     IntentResult)
            self._entry("intent", f"{intent.intent} (confidence {intent.confidence:.2f}): {intent.reason}", turn=turn)
            if intent.intent == "finding":
                st.findings.append(msg.text)
                self._entry("finding", msg.text, turn=turn, actor=msg.author,
                            data={"confidence": intent.confidence, "reason": intent.reason})
                return False
        proposal = await self._codegen("interactive", msg.text)
        if proposal.code is None:
            self._entry("reply", f"No tool fits this request: {proposal.reason or 'no reason given'}", turn=turn)
            return False
        code = proposal.code
        requester = msg.author
        while True:
            context = await self._policy_context()
            decision = decide_review(ReviewRequest(
                phase=Phase.INTERACTIVE, code=code, catalog=context.catalog,
                session_policies=st.session_policies, grants=context.grants,
                allow_mutating_autorun=self._inp.allow_mutating_autorun,
            ))
            self._entry("code", code, turn=turn, data={
                "code_hash": decision.code_hash, "summary": proposal.summary, "tools": list(decision.tools),
                "trigger_signals": proposal.trigger_signals, "strategy": proposal.strategy,
            })
            self._entry("policy", f"{decision.outcome.value}: {decision.detail}", turn=turn,
                        data={"reason": decision.reason.value, "code_hash": decision.code_hash,
                              "allow_set": list(decision.allow_set)})
            self._audit("review_decided", "policy", {
                "turn": turn, "code_hash": decision.code_hash, "outcome": decision.outcome.value,
                "reason": decision.reason.value, "tools": list(decision.tools), "requester": requester,
            })
            if decision.outcome is ReviewOutcome.RUN:
                await self._execute(turn, code, decision, proposal, f"policy:{decision.reason.value}", requester)
                return False
            if decision.outcome is ReviewOutcome.REFUSE:
                self._entry("refused_run", decision.detail, turn=turn, data={"reason": decision.reason.value})
                return False
            answer, expired = await self._ask(turn, code, decision, proposal, requester)
            if answer is None:
                return expired
            if answer.kind is DecisionKind.REJECT:
                self._entry("reply", f"Rejected by {answer.approver}; the code did not run.", turn=turn)
                return False
            if answer.kind is DecisionKind.EDIT:
                # The edited code is new code (new hash, reviewed again), and its author is now the one
                # asking for it: whoever edited cannot also be the distinct approver of a state change.
                code = answer.replacement_code or code
                requester = answer.approver
                proposal = proposal.model_copy(update={"summary": f"{proposal.summary} (edited by {answer.approver})"})
                continue
            await self._remember(turn, code, decision, answer, context)
            await self._execute(turn, code, decision, proposal, answer.approver, requester)
            return False

    async def _ask(self, turn: int, code: str, decision: ReviewDecision, proposal: CodegenResult,
                   requester: str) -> tuple[OperatorDecision | None, bool]:
        """Publish the pending review and wait for an accepted answer (or the session closing / expiring)."""
        self._pending = PendingView(
            session_id=self._inp.session_id, turn=turn, code_hash=decision.code_hash, code=code,
            summary=proposal.summary, trigger_signals=proposal.trigger_signals, requester=requester,
            read_only=decision.read_only, tools=list(decision.tools), state_changing=list(decision.state_changing),
            reason=decision.reason.value, detail=decision.detail, choices=list(decision.choices),
            allow_set=list(decision.allow_set), task_id=self._inp.task_id,
        )
        self._review = PendingReview(turn=turn, code_hash=decision.code_hash, requester=requester,
                                     read_only=decision.read_only, choices=decision.choices)
        self._answer = None
        self._entry("review", f"waiting for a decision on {short_hash(decision.code_hash)}: {decision.detail}",
                    turn=turn, data={"code_hash": decision.code_hash, "choices": [c.value for c in decision.choices]})
        workflow.upsert_search_attributes([AWAITING.value_set(True)])
        answered = await self._wait(lambda: self._answer is not None or self._closing())
        workflow.upsert_search_attributes([AWAITING.value_set(False)])
        answer, self._answer = self._answer, None
        self._pending = None
        self._review = None
        if answer is None:
            why = "the session expired" if not answered else "the session is closing"
            self._entry("system", f"review of {short_hash(decision.code_hash)} withdrawn: {why}", turn=turn)
        return answer, not answered

    async def _remember(self, turn: int, code: str, decision: ReviewDecision, answer: OperatorDecision,
                        context: PolicyContext) -> None:
        """Store what the operator chose: a session policy, or durable grants for procedure-only code."""
        procedure_code = context.catalog.procedure_code
        if answer.kind is DecisionKind.AUTO_RUN and decision.tools and all(
            is_procedure_name(t) and t in procedure_code for t in decision.tools
        ):
            grants = [make_grant(name, procedure_code, answer.approver, workflow.now()) for name in decision.tools]
            granted = await workflow.execute_activity(
                names.INVESTIGATION_GRANT, GrantInput(session_id=self._inp.session_id, turn=turn, grants=grants),
                result_type=list[str], task_queue=Queues().store, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=STORE_RETRY,
            )
            for grant in grants:
                if grant.procedure in granted:
                    self._st.grants[grant.procedure] = grant
            self._entry("grant", f"durable auto-run granted to {', '.join(granted)} by {answer.approver}",
                        turn=turn, actor=answer.approver, data={"procedures": granted})
            return
        policy = {DecisionKind.AUTO_RUN: CodePolicy.AUTO_RUN, DecisionKind.ALWAYS_ASK: CodePolicy.ALWAYS_ASK}
        chosen = policy.get(answer.kind)
        if chosen is None:
            return
        hash_, entry = make_session_policy(code, chosen, procedure_code, answer.approver)
        self._st.session_policies[hash_] = entry
        self._audit("session_policy_set", answer.approver, {"turn": turn, "code_hash": hash_, "policy": chosen.value})

    async def _execute(self, turn: int, code: str, decision: ReviewDecision, proposal: CodegenResult,
                       approver: str, requester: str, capture: bool = True) -> None:
        """Run in the sandbox with the decision's allow-set; ``capture`` keeps human-approved code for finalize."""
        st = self._st
        st.seq += 1
        run_id = f"investigate:{self._inp.session_id}:t{turn}:{short_hash(decision.code_hash)}:{st.seq}"
        try:
            out: SandboxRunResult = await workflow.execute_activity(
                names.EXECUTE_CODE,
                SandboxRunRequest(run_id=run_id, code=with_task_preamble(code, self._inp.task_id),
                                  allowed_tools=list(decision.allow_set), actor=approver),
                result_type=SandboxRunResult, task_queue=Queues().sandbox,
                start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=HEARTBEAT, retry_policy=SANDBOX_RETRY,
            )
        except ActivityError as exc:
            detail = _cause(exc)
            self._entry("refused_run", f"the run did not complete: {detail}", turn=turn, data={"run_id": run_id})
            self._audit("code_run_failed", approver, {"turn": turn, "run_id": run_id, "error": detail})
            return
        denied = [f"{c.tool}: {c.reason}" for c in out.calls if c.outcome == "denied"]
        self._entry("run", f"{out.status}; {len(out.calls)} tool call(s)", turn=turn, actor=approver, data={
            "run_id": run_id, "status": out.status, "calls": [c.model_dump() for c in out.calls],
            "return_value": _bounded(out.return_value), "error": out.error, "isolation": out.isolation,
            "full_output_ref": out.full_output_ref, "code_hash": decision.code_hash,
        })
        self._audit("code_run", approver, {
            "turn": turn, "run_id": run_id, "code_hash": decision.code_hash, "status": out.status,
            "allow_set": list(decision.allow_set), "requester": requester, "denied": denied,
        })
        summary: SummaryResult = await self._llm(names.INVESTIGATION_SUMMARY, SummaryInput(
            session_id=self._inp.session_id, request=proposal.summary, code_summary=proposal.summary,
            status=out.status, return_value=out.return_value, error=out.error, stdout=out.stdout.preview,
            denied_calls=denied, tools_called=[c.tool for c in out.calls if c.outcome == "allowed"],
        ), SummaryResult)
        self._entry("reply", summary.reply, turn=turn)
        if not capture:
            return
        st.captured.append(CapturedRun(
            turn=turn, code=code, code_hash=decision.code_hash, tools=list(decision.tools), summary=proposal.summary,
            trigger_signals=proposal.trigger_signals, result_summary=summary.result_summary or summary.reply[:300],
            executed_at=workflow.now(), approved_by=approver, ok=out.status == "ok",
        ))

    # ------------------------------------------------------------------ automatic phase
    async def _startup_hypothesis(self) -> None:
        """Read-only by policy: procedures replayed only when their code reads; the rest become suggestions."""
        context = await self._policy_context()
        stored = sorted(context.catalog.procedure_code)
        for name in stored[:MAX_STARTUP_REPLAYS]:
            code = context.catalog.procedure_code[name]
            decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=code, catalog=context.catalog,
                                                   source="stored_procedure"))
            if decision.outcome is ReviewOutcome.RUN:
                await self._execute(0, code, decision, CodegenResult(code=code, summary=f"replay of {name}"),
                                    "automatic", self._inp.requester, capture=False)
            else:
                self._entry("suggestion", f"{name} was not replayed automatically: {decision.detail} "
                            "Ask for it in this session to review and run it.",
                            data={"procedure": name, "reason": decision.reason.value})
                self._audit("automatic_refused", "policy", {"procedure": name, "reason": decision.reason.value,
                                                            "state_changing": list(decision.state_changing)})
        proposal = await self._codegen("automatic", HYPOTHESIS_REQUEST)
        if proposal.code is None:
            self._entry("hypothesis", f"no start-up probe: {proposal.reason or 'no tool fits'}")
            return
        decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=proposal.code, catalog=context.catalog))
        self._entry("code", proposal.code, turn=0, data={"code_hash": decision.code_hash, "phase": "automatic",
                                                          "summary": proposal.summary})
        if decision.outcome is not ReviewOutcome.RUN:
            self._entry("refused_run", f"start-up probe refused: {decision.detail}", turn=0,
                        data={"reason": decision.reason.value, "state_changing": list(decision.state_changing)})
            self._audit("automatic_refused", "policy", {"code_hash": decision.code_hash,
                                                        "reason": decision.reason.value,
                                                        "state_changing": list(decision.state_changing)})
            return
        await self._execute(0, proposal.code, decision, proposal, "automatic", self._inp.requester, capture=False)
        replies = [e for e in self._st.transcript if e.kind == "reply" and e.turn == 0]
        if replies:
            self._entry("hypothesis", replies[-1].text, turn=0)

    # ------------------------------------------------------------------ closing
    async def _close(self, status: SessionStatus) -> InvestigationResult:
        st = self._st
        actor = (self._finalize.actor if self._finalize else self._abandon.actor if self._abandon else "system")
        resolved = status is SessionStatus.FINALIZED and self._finalize is not None
        result: FinalizeResult = await workflow.execute_activity(
            names.INVESTIGATION_FINALIZE,
            FinalizeInput(
                session_id=self._inp.session_id, task_id=self._inp.task_id, symptom=self._inp.symptom,
                outcome="resolved" if resolved else "abandoned",
                cause=self._finalize.cause if resolved else None,
                resolution=self._finalize.resolution if resolved else None,
                actor=actor, findings=st.findings, captured=st.captured,
            ),
            result_type=FinalizeResult, task_queue=Queues().store, start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=HEARTBEAT, retry_policy=STORE_RETRY,
        )
        st.status = status
        workflow.upsert_search_attributes([AWAITING.value_set(False)])
        kept = result.procedures + result.tentative
        self._entry("system", f"session {status.value}; procedures stored: {', '.join(kept) or 'none'}",
                    actor=actor, data=result.model_dump())
        await self._flush()
        return InvestigationResult(
            session_id=self._inp.session_id, status=status, turns=st.turn, cause=result.cause,
            resolution=result.resolution, procedures=kept,
            detail=self._abandon.reason if self._abandon else "",
        )

    # ------------------------------------------------------------------ helpers
    def _accept_message(self, msg: OperatorMessage) -> None:
        self._touch()
        if self._st.status is SessionStatus.ACTIVE and not self._closing():
            self._st.inbox.append(msg)

    def _receive_decision(self, decision: OperatorDecision) -> DecisionVerdict:
        self._touch()
        verdict = validate_decision(self._review, decision, self._inp.rules)
        body = {"turn": decision.turn, "code_hash": decision.code_hash, "kind": decision.kind.value,
                "approver": decision.approver, "accepted": verdict.accepted,
                "refusal": verdict.refusal.value if verdict.refusal else None, "detail": verdict.detail}
        if verdict.accepted:
            self._answer = decision
            self._review = None  # answered: a second decision for the same prompt finds nothing pending
            self._entry("decision", f"{decision.approver} chose {decision.kind.value}", turn=decision.turn,
                        actor=decision.approver, data=body)
            self._audit("decision_accepted", decision.approver, body)
        else:
            self._entry("refused_decision", f"decision from {decision.approver} refused: {verdict.detail}",
                        turn=decision.turn, actor=decision.approver, data=body)
            self._audit("decision_refused", decision.approver, body)
        return verdict

    def _require_open(self) -> None:
        if self._st.status is not SessionStatus.ACTIVE or self._closing():
            raise ApplicationError("this investigation is closing or closed; start a new one", type="closed")

    def _closing(self) -> bool:
        return self._finalize is not None or self._abandon is not None

    def _touch(self) -> None:
        self._last_touch = workflow.now()

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self._inp.max_history_events

    async def _wait(self, ready: Callable[[], bool]) -> bool:
        """Wait for ``ready`` while serving revokes and audit; False when the session sat idle too long."""
        while True:
            await self._serve_controls()
            if ready():
                return True
            deadline = self._last_touch + timedelta(seconds=self._inp.idle_timeout_s)
            remaining = (deadline - workflow.now()).total_seconds()
            if remaining <= 0:
                return False
            try:
                await workflow.wait_condition(lambda: ready() or bool(self._outbox) or bool(self._st.revokes),
                                              timeout=remaining)
            except asyncio.TimeoutError:
                continue

    async def _serve_controls(self) -> None:
        while self._st.revokes:
            await self._process_revoke(self._st.revokes.pop(0))
        await self._flush()

    async def _process_revoke(self, request: RevokeRequest) -> None:
        st = self._st
        context = await self._policy_context()
        plan = plan_revocation(request.target, st.session_policies, context.grants)
        if not plan.ok:
            self._entry("revoke", f"nothing revoked: {plan.error}", actor=request.actor)
            self._audit("revoke_refused", request.actor, {"target": request.target, "error": plan.error})
            return
        for hash_ in plan.session_hashes:
            st.session_policies.pop(hash_, None)
        revoked: list[str] = []
        if plan.procedures:
            st.audit_seq += 1
            revoked = await workflow.execute_activity(
                names.INVESTIGATION_REVOKE_GRANTS,
                RevokeGrantsInput(session_id=self._inp.session_id, procedures=list(plan.procedures),
                                  actor=request.actor, dedup_key=f"{self._inp.session_id}:revoke:{st.audit_seq}"),
                result_type=list[str], task_queue=Queues().store, start_to_close_timeout=timedelta(seconds=30),
                retry_policy=STORE_RETRY,
            )
            for name in plan.procedures:
                st.grants.pop(name, None)
        what = [short_hash(h) for h in plan.session_hashes] + revoked
        self._entry("revoke", f"revoked by {request.actor}: {', '.join(what) or 'nothing was set'}",
                    actor=request.actor, data={"session_hashes": list(plan.session_hashes), "procedures": revoked})
        self._audit("session_policy_revoked", request.actor,
                    {"target": request.target, "session_hashes": list(plan.session_hashes), "procedures": revoked})

    async def _policy_context(self) -> PolicyContext:
        context: PolicyContext = await workflow.execute_activity(
            names.INVESTIGATION_POLICY_CONTEXT,
            PolicyContextInput(session_id=self._inp.session_id,
                               allow_mutating_autorun=self._inp.allow_mutating_autorun),
            result_type=PolicyContext, task_queue=Queues().store, start_to_close_timeout=timedelta(seconds=60),
            retry_policy=STORE_RETRY,
        )
        self._st.grants = dict(context.grants)
        return context

    async def _codegen(self, phase: str, request: str) -> CodegenResult:
        return await self._llm(names.INVESTIGATION_CODEGEN, CodegenInput(
            session_id=self._inp.session_id, phase=phase, request=request, task_id=self._inp.task_id,
            symptom=self._inp.symptom, recent=self._recent(), allow_mutating_autorun=self._inp.allow_mutating_autorun,
        ), CodegenResult)

    async def _llm(self, activity: str, arg, result_type):
        return await workflow.execute_activity(
            activity, arg, result_type=result_type, task_queue=Queues().llm,
            start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=HEARTBEAT, retry_policy=LLM_RETRY,
        )

    async def _guarded(self, work) -> bool:
        """Run a turn; an activity that failed for good ends the turn with a note, never the session."""
        try:
            return bool(await work)
        except ActivityError as exc:
            self._pending = None
            self._review = None
            workflow.upsert_search_attributes([AWAITING.value_set(False)])
            self._entry("system", f"this step failed and was skipped: {_cause(exc)}")
            return False

    async def _flush(self) -> None:
        if not self._outbox:
            return
        batch, self._outbox = self._outbox, []
        await workflow.execute_activity(
            names.INVESTIGATION_AUDIT, AuditBatch(session_id=self._inp.session_id, records=batch), result_type=int,
            task_queue=Queues().store, start_to_close_timeout=timedelta(seconds=60), retry_policy=STORE_RETRY,
        )

    def _audit(self, kind: str, actor: str, body: dict) -> None:
        self._st.audit_seq += 1
        self._outbox.append(AuditRecord(kind=kind, actor=actor, body={"session": self._inp.session_id, **body},
                                        dedup_key=f"{self._inp.session_id}:audit:{self._st.audit_seq}"))

    def _entry(self, kind: str, text: str, *, turn: int | None = None, actor: str | None = None,
               data: dict | None = None) -> None:
        st = self._st
        st.seq += 1
        st.transcript.append(TranscriptEntry(seq=st.seq, at=workflow.now(), kind=kind, text=text, turn=turn,
                                             actor=actor, data=data or {}))
        if len(st.transcript) > TRANSCRIPT_KEEP:
            drop = len(st.transcript) - TRANSCRIPT_KEEP
            del st.transcript[:drop]
            st.dropped_entries += drop

    def _recent(self) -> list[str]:
        wanted = ("operator", "finding", "reply", "hypothesis")
        return [f"{e.kind}: {e.text[:500]}" for e in self._st.transcript if e.kind in wanted][-8:]


def _bounded(value: dict | None) -> dict | None:
    """A return value small enough for history and queries; the full output stays in its blob."""
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True, default=str)
    if len(text) <= MAX_RESULT_IN_TRANSCRIPT:
        return value
    return {"truncated": True, "preview": text[:MAX_RESULT_IN_TRANSCRIPT]}


def _cause(exc: ActivityError) -> str:
    cause = exc.cause
    while cause is not None and getattr(cause, "cause", None) is not None and not getattr(cause, "message", ""):
        cause = cause.cause
    return (getattr(cause, "message", None) or str(exc))[:500]

