"""Investigation: a long-lived, human-reviewed session (workflow id ``investigate:<session>``).

An operator message becomes a turn: intent → code generation → the trust policy's decision (computed
here, deterministically, from a catalogue and grants read by an activity) → if the policy asks, the
turn waits for a decision → sandboxed execution with exactly the allow-set the decision implies →
summary back to the operator. Waiting costs nothing and survives any worker restart: the decision
arrives as a signal (or an update, for UIs that want an answer) from any process, at any time.

Every operator request (message, decision, revoke, finalize, abandon) arrives as a raw payload, through a
signal or an update of the same name, and is admitted by one path (``_admit``): bounded in size, validated
against its model, authenticated against the deployment's approval policy (the worker's rules and approver
registry, read by an activity; never taken from the client), and only then acted on. A refused request is
recorded in the transcript and the audit log whichever way it came; an update gets the refusal back as a
non-retryable error. A decision names the turn and full code hash it answers and is signed by its approver
(``policy.decisions.validate_decision``); every accepted or refused decision's audit row carries the policy
version that judged it and the signature.

Reuse before regenerate: before a turn's code is generated, the stored, approved procedures are read with how
near each is to the request (an activity), and ``policy.reuse.choose_procedure`` picks one that fits the
catalogue, the session's cause and the task; it is proposed as its stored body with this task's values bound
in front, without a model call, and reviewed like any code (the review shows where it came from and, when its
body changed under its signature, the diff). A message with ``fresh_code`` asks for new code instead.

When the session opens on a task, a start-up hypothesis runs in the automatic phase: read-only
allow-set, stored procedures that would change state skipped and surfaced as suggestions.

Idle sessions expire (their procedures are kept as tentative); long sessions continue-as-new with
their whole state; ``BambooAwaitingApproval`` and ``BambooTaskId`` make pending reviews findable.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from bamboo.investigation.code import with_task_preamble
    from bamboo.sandbox import contract as sandbox
    from bamboo.sandbox.contract import ExecuteCodeInput
    from bamboo.investigation.contract import (
        AbandonRequest, Ack, ApprovalsView, AuditBatch, AuditRecord, CapturedRun, CodegenInput, CodegenResult,
        FinalizeInput, FinalizeRequest, GrantInput, IntentInput, InvestigationResult,
        InvestigationStart, InvestigationState, MESSAGE_KINDS, MESSAGE_MODELS, Message, OperatorMessage,
        MEMO_REQUEST_CHARS, PENDING_MEMO, PendingMemo, PendingView, PolicyContext, PolicyContextInput, ProcedureRun, Query, ReuseQuery,
        ReuseView, RevokeGrantsInput, RevokeRequest, SessionStatus, SummaryInput, SummaryResult, TRANSCRIPT_KEEP,
        TranscriptEntry, WrittenProcedure, WrittenProcedures, WrittenQuery,
    )
    from policy.approvers import DeploymentPolicy, Role, authenticate
    from policy.code_identity import code_hash, normalize_code, short_hash
    from policy.signing import Authorization, StatementKind
    from policy.decisions import (
        DecisionKind, DecisionRefusal, DecisionVerdict, OperatorDecision, PendingReview, review_digest,
        validate_decision,
    )
    from policy.procedures import assess_read_only, reached_procedures
    from policy.reuse import ReuseProposal, TaskFacts, choose_procedure, describe_unfit, is_bound_body
    from policy.review_facts import code_diff, procedure_view, review_facts
    from policy.grants import (
        CodePolicy, ProcedureGrant, grant_again_after, grant_terms, make_session_policy, signed_grants,
    )
    from policy.phases import Phase
    from policy.signature import ScanConventions, scan_code
    from policy.tool_surface import allowed_names
    from policy.procedures import ABSENT_PROCEDURE, is_procedure_name
    from policy.review import ReviewDecision, CodeVerdict, ReviewRequest, decide_review
    from policy.revocation import plan_revocation
    from bamboo.contract import AWAITING_APPROVAL, KIND, SPEND_USD, TASK_ID, Kind
    from bamboo.models.spend import BudgetSpent, Spend, over_budget
    from bamboo.investigation import contract


I = TypeVar("I", bound=BaseModel)
O = TypeVar("O")
RUN_TIMEOUT_S = 60.0  # how long an approved block may run in the sandbox
MAX_STARTUP_REPLAYS = 3
MAX_RESULT_IN_TRANSCRIPT = 4000
HYPOTHESIS_REQUEST = "Form a first hypothesis of why this task failed, using read-only tools."
# How old a cached approval policy may be: a decision re-reads it almost always (so a revoked approver's
# decision is refused within seconds), a message a little less eagerly.
DECISION_POLICY_MAX_AGE = timedelta(seconds=2)
REQUEST_POLICY_MAX_AGE = timedelta(seconds=10)
MAX_REFUSAL_DETAIL = 300


class _Request:
    """How one kind of operator request is admitted: its model, statement kind, size bound and who speaks."""

    def __init__(self, model: type[BaseModel], kind: StatementKind, max_bytes: int, speaker: str) -> None:
        self.model, self.kind, self.max_bytes, self.speaker = model, kind, max_bytes, speaker


_LIMITS: dict[Message, tuple[int, str]] = {  # size bound and the field naming who speaks
    Message.MESSAGE: (24 * 1024, "author"), Message.DECIDE: (96 * 1024, "approver"),
    Message.REVOKE: (8 * 1024, "actor"), Message.FINALIZE: (8 * 1024, "actor"), Message.ABANDON: (8 * 1024, "actor"),
}
REQUESTS: dict[Message, _Request] = {
    name: _Request(MESSAGE_MODELS[name], MESSAGE_KINDS[name], *_LIMITS[name]) for name in Message}


class _Refused(Exception):
    """A request that is not admitted: the refusal's machine name and a one-line reason."""

    def __init__(self, refusal: str, detail: str) -> None:
        super().__init__(detail)
        self.refusal, self.detail = refusal, detail[:MAX_REFUSAL_DETAIL]


@workflow.defn(name=contract.WORKFLOW_NAME)
class Investigation:
    @workflow.init
    def __init__(self, inp: InvestigationStart) -> None:
        self._inp = inp
        # Carried state is the session's own, handed over by its continue-as-new, which only Temporal can mark (a
        # run so started has a continued run id). From anyone else's start it is a forgery: an inbox of unsigned
        # messages under any author (the requester approving her own state-changing code as "bob's" request), a
        # run marked approved by someone who never saw it, standing approvals, used nonces. It is not adopted,
        # and the run fails (``run``).
        self._forged_carry = inp.carried is not None and not handed_over(workflow.info())
        adopted = None if self._forged_carry else inp.carried
        self._st: InvestigationState = adopted.model_copy(deep=True) if adopted else InvestigationState()
        self._pending: PendingView | None = None
        self._review: PendingReview | None = None
        self._answer: OperatorDecision | None = None
        self._finalize: FinalizeRequest | None = None
        self._abandon: AbandonRequest | None = None
        self._outbox: list[AuditRecord] = []
        self._last_touch = workflow.now()
        self._context: PolicyContext | None = None
        self._context_at = workflow.now()
        # Requests are admitted one at a time, in arrival order, even when one waits for a policy refresh.
        self._admission = asyncio.Lock()

    # ------------------------------------------------------------------ queries
    @workflow.query(name=Query.TRANSCRIPT)
    def transcript(self, since: int = 0) -> list[TranscriptEntry]:
        return [e for e in self._st.transcript if e.seq > since]

    @workflow.query(name=Query.PENDING)
    def pending(self) -> PendingView | None:
        return self._pending

    @workflow.query(name=Query.APPROVALS)
    def approvals(self) -> ApprovalsView:
        return ApprovalsView(session_policies=dict(self._st.session_policies), grants=dict(self._st.grants))

    @workflow.query(name=Query.STATUS)
    def status(self) -> SessionStatus:
        return self._st.status

    @workflow.query(name=Query.SPEND)
    def spend(self) -> Spend:
        return self._st.spend

    # ------------------------------------------------------------------ signals and updates
    # Each request has a signal (fire and forget: refusals land in the transcript) and an update of the same
    # name (the sender gets the verdict). Both take the raw payload, so a malformed one is refused and
    # recorded here instead of being dropped by the SDK with only a worker-log line.
    @workflow.signal(name=Message.MESSAGE)
    async def message(self, raw: RawValue) -> None:
        await self._admit(Message.MESSAGE, raw)

    @workflow.signal(name=Message.DECIDE)
    async def decide(self, raw: RawValue) -> None:
        await self._admit(Message.DECIDE, raw)

    @workflow.signal(name=Message.REVOKE)
    async def revoke(self, raw: RawValue) -> None:
        await self._admit(Message.REVOKE, raw)

    @workflow.signal(name=Message.FINALIZE)
    async def finalize(self, raw: RawValue) -> None:
        await self._admit(Message.FINALIZE, raw)

    @workflow.signal(name=Message.ABANDON)
    async def abandon(self, raw: RawValue) -> None:
        await self._admit(Message.ABANDON, raw)

    @workflow.update(name=Message.MESSAGE)
    async def message_update(self, raw: RawValue) -> Ack:
        return await self._admit_or_raise(Message.MESSAGE, raw)

    @message_update.validator
    def _validate_message(self, raw: RawValue) -> None:
        _check_size(Message.MESSAGE, raw)

    @workflow.update(name=Message.DECIDE)
    async def decide_update(self, raw: RawValue) -> Ack:
        return await self._admit_or_raise(Message.DECIDE, raw)

    @decide_update.validator
    def _validate_decide(self, raw: RawValue) -> None:
        _check_size(Message.DECIDE, raw)

    @workflow.update(name=Message.REVOKE)
    async def revoke_update(self, raw: RawValue) -> Ack:
        return await self._admit_or_raise(Message.REVOKE, raw)

    @revoke_update.validator
    def _validate_revoke(self, raw: RawValue) -> None:
        _check_size(Message.REVOKE, raw)

    @workflow.update(name=Message.FINALIZE)
    async def finalize_update(self, raw: RawValue) -> Ack:
        return await self._admit_or_raise(Message.FINALIZE, raw)

    @finalize_update.validator
    def _validate_finalize(self, raw: RawValue) -> None:
        _check_size(Message.FINALIZE, raw)

    @workflow.update(name=Message.ABANDON)
    async def abandon_update(self, raw: RawValue) -> Ack:
        return await self._admit_or_raise(Message.ABANDON, raw)

    @abandon_update.validator
    def _validate_abandon(self, raw: RawValue) -> None:
        _check_size(Message.ABANDON, raw)

    # ------------------------------------------------------------------ run
    @workflow.run
    async def run(self, inp: InvestigationStart) -> InvestigationResult:
        if not handed_over(workflow.info()):
            # The memo a session starts with is its starter's, any keys and values: Temporal Web showed them as the
            # session's, and `bamboo approvals` a forged pending review, until a worker ran. The session's memo
            # holds only what the session publishes (``_publish_pending``), which its continue-as-new carries on;
            # a retry's or a schedule's run starts with the starter's memo again.
            started_with = workflow.memo()
            if started_with:
                workflow.upsert_memo({key: None for key in started_with})
        if self._forged_carry:
            raise ApplicationError("a session's carried state is accepted only from its own continue-as-new; start "
                                   "the session without it", type="forged_carried_state", non_retryable=True)
        st = self._st
        predecessor = workflow.info().continued_run_id
        if predecessor is not None:
            # Temporal marks a run continued from any workflow's continue-as-new, not only ours: nothing of this run
            # (its carried state, the memo it was started with, the first run its review keys name) counts until the
            # run it continues is known to be ours.
            await self._policy_context(predecessor=predecessor)
        attrs: list[SearchAttributeUpdate[Any]] = [KIND.value_set(Kind.INVESTIGATE.value),
                                                   AWAITING_APPROVAL.value_set(False)]
        if inp.task_id is not None:
            attrs.append(TASK_ID.value_set(inp.task_id))
        workflow.upsert_search_attributes(attrs)
        if inp.carried is None:
            # The start names its requester unsigned (whoever may start workflows may name anyone); each request in
            # the session is signed, and it is those that say who asked for what.
            self._entry("system", f"session {inp.session_id} opened, naming {inp.requester} as its requester (the "
                        "start is not signed; every request in it is)", actor=inp.requester)
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
        st.turn_spend = 0.0
        turn = st.turn
        self._entry("operator", msg.text, turn=turn, actor=msg.author)
        codified: WrittenProcedure | None = None
        if msg.codify is not None:
            codified = await self._written(msg.codify, turn)
            if codified is None:
                return False
            proposal, reuse = await self._codegen("interactive", codified.request()), None
            # The operator's own words: the written step is stored text (an incident's, or a model's reading of
            # one) and is shown apart from the verdict, labelled (frontends.review.said), not as the request.
            request = msg.text
        else:
            if not msg.force_tool and await self._is_finding(msg, turn):
                return False
            proposal, reuse = await self._propose(msg, turn)
            request = msg.text
        if proposal.code is None:
            if proposal.reason_by_model:  # the model's words stay a reply; the notice is the workflow's own
                if proposal.reason.strip():
                    self._entry("reply", proposal.reason, turn=turn)
                self._entry("notice", "No code to review: the model wrote none this turn.", turn=turn)
            else:
                self._entry("notice", f"No code to review: {proposal.reason or 'no reason given'}", turn=turn)
            return False
        code = normalize_code(proposal.code)  # the text the sandbox runs is the one shown and judged
        requester = msg.author
        askers = [msg.author]
        while True:
            context = await self._decision_context([code], [reuse.reused.procedure] if reuse is not None else [])
            decision = decide_review(ReviewRequest(
                phase=Phase.INTERACTIVE, code=code, catalog=context.catalog,
                session_policies=st.session_policies, grants=context.grants,
                reused=reuse.reused if reuse is not None else None, policy=context.policy,
            ))
            self._entry("code", code, turn=turn, data={
                "code_hash": decision.code_hash, "summary": proposal.summary, "tools": list(decision.tools),
                "trigger_signals": proposal.trigger_signals, "strategy": proposal.strategy,
                "reused": reuse.reused.procedure if reuse is not None else None,
                "codifies": codified.name if codified is not None else None,
            })
            self._entry("policy", f"{decision.outcome.value}: {decision.detail}", turn=turn,
                        data={"reason": decision.reason.value, "code_hash": decision.code_hash,
                              "allow_set": list(decision.allow_set)})
            self._audit("review_decided", "policy", {
                "turn": turn, "code_hash": decision.code_hash, "outcome": decision.outcome.value,
                "reason": decision.reason.value, "tools": list(decision.tools), "requester": requester,
                "policy_version": context.policy.version,
            })
            if decision.outcome is CodeVerdict.RUN:
                await self._execute(turn, code, decision, proposal, f"policy:{decision.reason.value}", requester,
                                    reuse=reuse, request=request, codified=codified, context=context)
                return False
            if decision.outcome is CodeVerdict.REFUSE:
                self._entry("refused_run", decision.detail, turn=turn, data={"reason": decision.reason.value})
                return False
            answer, expired = await self._ask(turn, code, decision, proposal, requester, askers, context, request,
                                              reuse, codified)
            if answer is None:
                return expired
            if answer.kind is DecisionKind.REJECT:
                hint = " Send /new with the request for newly written code." if reuse is not None else ""
                self._entry("notice", f"Rejected by {answer.approver}; the code did not run.{hint}", turn=turn)
                return False
            if answer.kind is DecisionKind.EDIT:
                # The edited code is new code (new hash, reviewed again), and its author is now one of those
                # asking for it: neither the first requester nor an editor can be the distinct approver.
                code = normalize_code(answer.replacement_code) if answer.replacement_code else code
                requester = answer.approver
                askers.append(answer.approver)
                proposal = proposal.model_copy(update={"summary": f"{proposal.summary} (edited by {answer.approver})"})
                reuse = None  # edited code is new code, not the stored procedure any more
                continue
            await self._remember(turn, code, decision, answer, context, reuse)
            await self._execute(turn, code, decision, proposal, answer.approver, requester, reuse=reuse,
                                request=request, codified=codified, context=context,
                                answer=answer.auth.nonce if answer.auth is not None else None)
            return False

    async def _is_finding(self, msg: OperatorMessage, turn: int) -> bool:
        """Ask the intent step whether the message states a finding (kept, no code) rather than asks for work."""
        intent = await self._llm(contract.intent,
                                 IntentInput(session_id=self._inp.session_id, text=msg.text, recent=self._recent()))
        self._entry("intent", f"{intent.intent} (confidence {intent.confidence:.2f}): {intent.reason}", turn=turn)
        if intent.intent != "finding":
            return False
        self._st.findings.append(msg.text)
        self._entry("finding", msg.text, turn=turn, actor=msg.author,
                    data={"confidence": intent.confidence, "reason": intent.reason})
        return True

    # ------------------------------------------------------------------ written procedures become code
    async def _written(self, wanted: str, turn: int) -> WrittenProcedure | None:
        """The written procedure ``/codify`` names (its number in the listing, or its name); with none named,
        or none found, the listing is the turn's answer and nothing is generated."""
        first_request = next((e.text for e in self._st.transcript if e.kind == "operator"), "")
        try:
            found: WrittenProcedures = await workflow.execute_activity(
                contract.written_procedures,
                WrittenQuery(session_id=self._inp.session_id, cause=self._inp.cause,
                             hint=(self._inp.symptom or first_request)[:2000]),
                **contract.REUSE_STEP.options())
        except ActivityError as exc:
            self._entry("notice", f"The written procedures could not be read ({_cause(exc)}); try /codify again.",
                        turn=turn)
            return None
        chosen = found.pick(wanted)
        if chosen is not None and chosen.codified_as is None:
            self._entry("codify", f"writing code for the written procedure {chosen.name!r}, recorded in "
                        f"{len(chosen.incidents)} resolved incident(s); it is reviewed like any code",
                        turn=turn, data={"written": chosen.model_dump(), "chosen": True})
            return chosen
        if chosen is not None:
            self._entry("notice", f"{chosen.name!r} was turned into code already: {chosen.codified_as}. Ask for it "
                        "in your own words and the stored procedure is proposed.", turn=turn)
            return None
        listing = "; ".join(f"{i}. {w.name}" + (f" (code: {w.codified_as})" if w.codified_as else "")
                            for i, w in enumerate(found.items, 1))
        if not found.items:
            text = ("No written procedure fits this session: its cause has none recorded and none is near its "
                    "symptom.")
        elif wanted.strip():
            text = f"No written procedure {wanted.strip()!r} here; send /codify N with one of: {listing}"
        else:
            text = f"Written procedures ({found.basis}): {listing}. Send /codify N to turn one into code."
        self._entry("written", text, turn=turn,
                    data={"basis": found.basis, "items": [w.model_dump() for w in found.items]})
        return None

    # ------------------------------------------------------------------ reuse before regenerate
    async def _propose(self, msg: OperatorMessage, turn: int) -> tuple[CodegenResult, ReuseProposal | None]:
        """A stored procedure that fits this turn, proposed without a model call; else newly generated code."""
        if msg.fresh_code:
            self._entry("reuse", "new code was asked for, so no stored procedure is proposed", turn=turn,
                        data={"chosen": False, "fresh_code": True})
        else:
            reuse = await self._reuse(msg.text, turn)
            if reuse is not None:
                candidate = reuse.candidate
                return CodegenResult(
                    code=reuse.code, summary=candidate.summary or f"the stored procedure {candidate.name}",
                    strategy=f"reuse of {candidate.name}",
                ), reuse
        return await self._codegen("interactive", msg.text), None

    async def _reuse(self, request: str, turn: int) -> ReuseProposal | None:
        st = self._st
        try:
            found = await workflow.execute_activity(
                contract.reuse_candidates,
                ReuseQuery(session_id=self._inp.session_id, request=request, task_id=self._inp.task_id,
                           task_known=st.task_facts is not None),
                **contract.REUSE_STEP.options())
        except ActivityError as exc:  # reuse is an optimisation: without it the turn writes new code
            self._entry("reuse", f"stored procedures could not be matched ({_cause(exc)}); new code is written",
                        turn=turn, data={"chosen": False})
            return None
        if found.task is not None:
            st.task_facts = found.task
        task = st.task_facts or TaskFacts(
            parameters={"task_id": self._inp.task_id} if self._inp.task_id is not None else {})
        context = await self._policy_context(procedures=[candidate.name for candidate in found.candidates])
        outcome = choose_procedure(found.candidates, context.catalog, task, self._inp.cause, found.settings,
                                   found.tool_fit)
        if outcome.chosen is None:
            why = describe_unfit(outcome.unfit, found.farther)
            self._entry("reuse", f"no stored procedure fits, so new code is written: {why}", turn=turn,
                        data={"chosen": False, "unfit": [u.model_dump() for u in outcome.unfit[:20]]})
            return None
        chosen = outcome.chosen
        view = _reuse_view(chosen)
        self._entry("reuse", view.provenance_line(), turn=turn, data={
            "chosen": True, "procedure": chosen.reused.procedure, "code_hash": chosen.candidate.code_hash,
            "parameters": dict(chosen.reused.parameters), "similarity": chosen.candidate.similarity,
            "score": chosen.score, "cause_matched": chosen.cause_matched, "shared_clues": list(chosen.shared_clues)})
        self._audit("procedure_reused", "policy", {
            "turn": turn, "procedure": chosen.reused.procedure, "code_hash": chosen.candidate.code_hash,
            "parameters": dict(chosen.reused.parameters), "similarity": chosen.candidate.similarity})
        return chosen

    async def _ask(self, turn: int, code: str, decision: ReviewDecision, proposal: CodegenResult,
                   requester: str, askers: list[str], context: PolicyContext, request: str,
                   reuse: ReuseProposal | None = None,
                   codified: WrittenProcedure | None = None) -> tuple[OperatorDecision | None, bool]:
        """Publish the pending review and wait for an accepted answer (or the session closing / expiring)."""
        catalog = context.catalog
        conventions = ReviewRequest(phase=Phase.INTERACTIVE, code=code, catalog=catalog).conventions
        flags = catalog.read_only_flags()
        facts = review_facts(code, assess_read_only(code, flags, catalog.procedure_code, conventions), flags,
                             catalog.procedure_code, context.grants, context.granted_code, conventions)
        procedures = list(facts.procedures)
        task = self._st.task_facts
        if reuse is not None and is_bound_body(code, reuse.reused, catalog.procedure_code):
            name = reuse.reused.procedure
            procedures.insert(0, procedure_view(name, catalog.procedure_code[name], flags, catalog.procedure_code,
                                                context.grants, context.granted_code, conventions))
        grants, withheld = _offered_grants(_auto_run_grants(code, decision, reuse, catalog.procedure_code), context,
                                           workflow.now())
        review = review_digest(run=workflow.info().first_execution_run_id,
                               code_hash=decision.code_hash, read_only=decision.read_only, choices=decision.choices,
                               grants=grants, allow_set=decision.allow_set,
                               procedure_hashes=pinned_procedures(decision.allow_set, context),
                               read_only_tools=judged_read_only(decision.allow_set, context))
        self._pending = PendingView(
            session_id=self._inp.session_id, turn=turn, code_hash=decision.code_hash, code=code, grants=list(grants),
            grants_withheld=withheld, review=review,
            summary=proposal.summary, trigger_signals=proposal.trigger_signals, requester=requester,
            read_only=decision.read_only, tools=list(decision.tools), state_changing=list(decision.state_changing),
            reason=decision.reason.value, detail=decision.detail, choices=list(decision.choices),
            allow_set=list(decision.allow_set), task_id=self._inp.task_id,
            opaque_reasons=list(facts.opaque_reasons), hazards=list(facts.hazards),
            state_changing_lines={k: list(v) for k, v in facts.state_changing_lines.items()},
            procedures=procedures, policy_version=context.policy.version, rules=context.policy.rules,
            reuse=_reuse_view(reuse) if reuse is not None else None, codifies=codified,
            request=request, asked_at=workflow.now(), task_status=task.status if task else "",
            task_owner=task.owner if task else "",
            requester_accepted=False if reuse is not None and not decision.read_only else None,
        )
        self._review = PendingReview(session_id=self._inp.session_id, turn=turn, code_hash=decision.code_hash,
                                     requester=requester, requesters=tuple(askers), read_only=decision.read_only,
                                     choices=decision.choices, grants=grants, review=review,
                                     from_store=reuse is not None)
        self._answer = None
        self._entry("review", f"waiting for a decision on {short_hash(decision.code_hash)}: {decision.detail}",
                    turn=turn, data={"code_hash": decision.code_hash, "choices": [c.value for c in decision.choices]})
        pending = self._pending
        _publish_pending(PendingMemo(run=workflow.info().first_execution_run_id, turn=turn,
                                     code_hash=decision.code_hash, requester=requester,
                                     read_only=decision.read_only, choices=list(decision.choices),
                                     task_id=pending.task_id, task_status=pending.task_status,
                                     task_owner=pending.task_owner, request=request[:MEMO_REQUEST_CHARS],
                                     asked_at=pending.asked_at, grants=list(grants), review=review))
        answered = await self._wait(lambda: self._answer is not None or self._closing())
        _publish_pending(None)
        answer, self._answer = self._answer, None
        self._pending = None
        self._review = None
        if answer is None:
            why = "the session expired" if not answered else "the session is closing"
            self._entry("system", f"review of {short_hash(decision.code_hash)} withdrawn: {why}", turn=turn)
        return answer, not answered

    async def _remember(self, turn: int, code: str, decision: ReviewDecision, answer: OperatorDecision,
                        context: PolicyContext, reuse: ReuseProposal | None = None) -> None:
        """Store what the operator chose: a session policy, or durable grants for procedure-only code and for
        a reused procedure (bound to the body the reviewer saw)."""
        procedure_code = context.catalog.procedure_code
        if not decision.read_only:
            return  # nothing standing is ever kept for code that changes state (auto-run is not offered for it)
        if answer.kind is DecisionKind.AUTO_RUN and answer.grants:  # the grants the review offered (validate_decision)
            await self._grant(turn, signed_grants(answer, self._inp.session_id, workflow.now()), answer.approver)
            return
        policy = {DecisionKind.AUTO_RUN: CodePolicy.AUTO_RUN, DecisionKind.ALWAYS_ASK: CodePolicy.ALWAYS_ASK}
        chosen = policy.get(answer.kind)
        if chosen is None:
            return
        hash_, entry = make_session_policy(code, chosen, procedure_code, answer.approver)
        self._st.session_policies[hash_] = entry
        self._audit("session_policy_set", answer.approver, {"turn": turn, "code_hash": hash_, "policy": chosen.value})

    async def _grant(self, turn: int, grants: list[ProcedureGrant], approver: str) -> None:
        granted = await workflow.execute_activity(
            contract.grant, GrantInput(session_id=self._inp.session_id, turn=turn, grants=grants),
            **contract.STORE_STEP.options())
        for grant in grants:
            if grant.procedure in granted:
                self._st.grants[grant.procedure] = grant
        if granted:
            self._entry("grant", f"durable auto-run granted to {', '.join(granted)} by {approver}",
                        turn=turn, actor=approver, data={"procedures": granted})
        held = [g.procedure for g in grants if g.procedure not in granted]
        if held:
            self._entry("system", f"no durable grant left for {', '.join(held)}: a grant of the same code was revoked "
                                  "less than the deployment's longest signature lifetime ago (the revoke said until "
                                  "when), or the procedure is no longer stored; this turn ran as answered",
                        turn=turn, actor=approver)

    async def _execute(self, turn: int, code: str, decision: ReviewDecision, proposal: CodegenResult,
                       approver: str, requester: str, capture: bool = True, *, reuse: ReuseProposal | None = None,
                       request: str = "", codified: WrittenProcedure | None = None,
                       context: PolicyContext, answer: str | None = None) -> None:
        """Run in the sandbox with the decision's allow-set; ``capture`` keeps human-approved code for finalize
        (a reused procedure as its stored body, so finalize adds this session to that procedure). ``context`` is
        the one the decision was made against: the run may call the stored procedures by the hash of the body it
        saw (``pinned_procedures``), and the tools it judged read-only only while they still are
        (``judged_read_only``). ``answer``: the nonce of the signed decision that authorises the run, recorded as
        used by this run before its code starts (``UsedDecision``)."""
        st = self._st
        st.seq += 1
        run_id = f"investigate:{self._inp.session_id}:t{turn}:{short_hash(decision.code_hash)}:{st.seq}"
        carried, self._outbox = self._outbox, []  # written by the run before its code starts (the decision's row)
        try:
            out = await workflow.execute_activity(
                sandbox.execute_code,
                ExecuteCodeInput(run_id=run_id, code=with_task_preamble(code, self._inp.task_id),
                                 allowed_tools=list(decision.allow_set), actor=approver, timeout_s=RUN_TIMEOUT_S,
                                 phase="automatic" if approver == "automatic" else "interactive",
                                 audit=self._audit_rows(carried),
                                 procedure_hashes=pinned_procedures(decision.allow_set, context),
                                 read_only_tools=judged_read_only(decision.allow_set, context),
                                 tool_names=run_tool_names(decision.allow_set, context),
                                 decision=None if answer is None else sandbox.UsedDecision(
                                     nonce=answer, session_id=self._inp.session_id)),
                **sandbox.SANDBOX_CALL.options())
        except ActivityError as exc:
            self._outbox[:0] = carried  # perhaps unwritten: flushed as usual (a written row's key skips it)
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
            "reused": reuse.reused.procedure if reuse is not None else None,
        })
        if reuse is not None:
            try:
                await workflow.execute_activity(contract.procedure_ran, ProcedureRun(
                    session_id=self._inp.session_id, procedure=reuse.reused.procedure,
                    code_hash=reuse.candidate.code_hash, at=workflow.now(), status=out.status),
                    **contract.STORE_STEP.options())
            except ActivityError as exc:  # the run happened; only its note on the procedure is missing
                self._entry("system", f"the last run of {reuse.reused.procedure} was not recorded: {_cause(exc)}",
                            turn=turn)
        try:
            summary = await self._llm(contract.summary, SummaryInput(
                session_id=self._inp.session_id, request=proposal.summary, code_summary=proposal.summary,
                status=out.status, return_value=out.return_value, error=out.error, stdout=out.stdout.preview,
                denied_calls=denied, tools_called=[c.tool for c in out.calls if c.outcome == "allowed"],
            ))
            self._entry("reply", summary.reply, turn=turn)
        except BudgetSpent as exc:  # the run happened and is kept for finalize; only its summary is skipped
            self._budget_stop(exc, turn)
            summary = SummaryResult(reply="", result_summary=f"{out.status}; not summarised: the model budget is spent")
        if not capture:
            return
        body = reuse.candidate.code if reuse is not None else code
        st.captured.append(CapturedRun(
            turn=turn, code=body, code_hash=code_hash(body), tools=list(decision.tools), summary=proposal.summary,
            trigger_signals=proposal.trigger_signals, result_summary=summary.result_summary or summary.reply[:300],
            executed_at=workflow.now(), approved_by=approver, ok=out.status == "ok", request=request[:500],
            reused=reuse.reused.procedure if reuse is not None else None, codified=codified,
        ))

    # ------------------------------------------------------------------ automatic phase
    async def _startup_hypothesis(self) -> None:
        """Read-only by policy: procedures replayed only when their code reads; the rest become suggestions."""
        replays = (await self._policy_context()).stored_procedures[:MAX_STARTUP_REPLAYS]
        context = await self._policy_context(procedures=replays)
        for name in replays:
            code = context.catalog.procedure_code.get(name)
            if code is None:  # dropped from the store between the two reads
                continue
            decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=code, catalog=context.catalog,
                                                   source="stored_procedure"))
            if decision.outcome is CodeVerdict.RUN:
                await self._execute(0, code, decision, CodegenResult(code=code, summary=f"replay of {name}"),
                                    "automatic", self._inp.requester, capture=False, context=context)
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
        code = normalize_code(proposal.code)
        context = await self._policy_context([code])
        decision = decide_review(ReviewRequest(phase=Phase.AUTOMATIC, code=code, catalog=context.catalog))
        self._entry("code", code, turn=0, data={"code_hash": decision.code_hash, "phase": "automatic",
                                                          "summary": proposal.summary})
        if decision.outcome is not CodeVerdict.RUN:
            self._entry("refused_run", f"start-up probe refused: {decision.detail}", turn=0,
                        data={"reason": decision.reason.value, "state_changing": list(decision.state_changing)})
            self._audit("automatic_refused", "policy", {"code_hash": decision.code_hash,
                                                        "reason": decision.reason.value,
                                                        "state_changing": list(decision.state_changing)})
            return
        await self._execute(0, code, decision, proposal, "automatic", self._inp.requester, capture=False,
                            context=context)
        replies = [e for e in self._st.transcript if e.kind == "reply" and e.turn == 0]
        if replies:
            self._entry("hypothesis", replies[-1].text, turn=0)

    # ------------------------------------------------------------------ closing
    async def _close(self, status: SessionStatus) -> InvestigationResult:
        st = self._st
        actor = (self._finalize.actor if self._finalize else self._abandon.actor if self._abandon else "system")
        finalized = self._finalize if status is SessionStatus.FINALIZED else None
        resolved = finalized is not None
        result = await workflow.execute_activity(
            contract.finalize,
            FinalizeInput(
                session_id=self._inp.session_id, task_id=self._inp.task_id, symptom=self._inp.symptom,
                outcome="resolved" if resolved else "abandoned",
                cause=finalized.cause if finalized is not None else None,
                resolution=finalized.resolution if finalized is not None else None,
                actor=actor, findings=st.findings, captured=st.captured,
                clues=list(st.task_facts.clues) if st.task_facts else [],
            ),
            **contract.FINALIZE_STEP.options(),
        )
        st.status = status
        _publish_pending(None)
        kept = result.procedures + result.tentative
        self._entry("system", f"session {status.value}; procedures stored: {', '.join(kept) or 'none'}",
                    actor=actor, data=result.model_dump())
        await self._flush()
        return InvestigationResult(
            session_id=self._inp.session_id, status=status, turns=st.turn, cause=result.cause,
            resolution=result.resolution, procedures=kept,
            detail=self._abandon.reason if self._abandon else "", spend=st.spend,
        )

    # ------------------------------------------------------------------ helpers
    # ------------------------------------------------------------------ admitting requests
    async def _admit_or_raise(self, name: Message, raw: RawValue) -> Ack:
        ack = await self._admit(name, raw)
        if not ack.accepted:
            raise ApplicationError(ack.detail, type=ack.refusal or "refused", non_retryable=True)
        return ack

    async def _admit(self, name: Message, raw: RawValue) -> Ack:
        """Decode, bound, authenticate and act on one request. A refusal is recorded and returned."""
        self._touch()
        spec = REQUESTS[name]
        speaker = "unknown"
        nonce: str | None = None
        async with self._admission:
            try:
                request = _decode(spec, raw)
                speaker = getattr(request, spec.speaker)
                auth = getattr(request, "auth", None)
                nonce = auth.nonce if auth is not None else None
                if isinstance(request, OperatorDecision):
                    return await self._admit_decision(request)
                return Ack(accepted=True, detail=await self._admit_request(name, spec, request))
            except _Refused as refused:
                self._record_refusal(name, speaker, refused, nonce)
                return Ack(accepted=False, detail=refused.detail, refusal=refused.refusal)

    async def _admit_request(self, name: Message, spec: _Request, request: BaseModel) -> str:
        """Messages, revokes, finalize and abandon: authenticated, then queued; returns the acknowledgement."""
        if not isinstance(request, (OperatorMessage, RevokeRequest, FinalizeRequest, AbandonRequest)):
            raise _Refused("malformed", f"{name} does not take a {type(request).__name__}")
        if self._st.status is not SessionStatus.ACTIVE or self._closing():
            raise _Refused("closed", "This investigation is closing or closed; start a new one.")
        speaker = getattr(request, spec.speaker)
        policy = (await self._fresh_context(REQUEST_POLICY_MAX_AGE)).policy
        verdict = authenticate(policy, kind=spec.kind, session_id=self._inp.session_id, identity=speaker,
                               body=request.signed_body(), auth=request.auth, now=workflow.now(),
                               seen_nonces=self._st.seen_nonces)
        if not verdict.ok:
            raise _Refused(verdict.refusal.value if verdict.refusal else "refused", verdict.detail)
        self._remember_nonce(request.auth)
        roles = (Role.REQUEST,) if name is Message.MESSAGE else (Role.REQUEST, Role.APPROVE, Role.APPROVE_STATE_CHANGING)
        if not any(policy.may(speaker, role) for role in roles):
            raise _Refused("missing_role", f"{speaker} is not registered to {'ask for code' if name is Message.MESSAGE else name} "
                                           "in investigations here; ask the deployment to register you.")
        if isinstance(request, OperatorMessage):
            self._st.inbox.append(request)
            return f"queued as message {len(self._st.inbox)} in line"
        if isinstance(request, RevokeRequest):
            plan = plan_revocation(request.target, self._st.session_policies, self._st.grants)
            if not plan.ok:
                raise _Refused("invalid_revoke_target", plan.error or "invalid revoke target")
            self._st.revokes.append(request)
            return "revocation queued; /approvals shows the result"
        if isinstance(request, FinalizeRequest):
            self._finalize = request
            return "finalizing"
        self._abandon = request
        return "abandoning"

    async def _admit_decision(self, decision: OperatorDecision) -> Ack:
        """Cheap checks against the pending review first; then a fresh policy for who may give this answer."""
        now = workflow.now()
        cached = self._context.policy if self._context is not None else DeploymentPolicy()
        early = validate_decision(self._review, decision, cached, now=now, seen_nonces=self._st.seen_nonces)
        if early.refusal not in _BEFORE_AUTHENTICATION:
            context = await self._fresh_context(DECISION_POLICY_MAX_AGE)
            early = validate_decision(self._review, decision, context.policy, now=workflow.now(),
                                      seen_nonces=self._st.seen_nonces)
            if early.signed:
                self._remember_nonce(decision.auth)
        return self._apply_decision(decision, early)

    def _apply_decision(self, decision: OperatorDecision, verdict: DecisionVerdict) -> Ack:
        policy = self._context.policy if self._context is not None else DeploymentPolicy()
        auth = decision.auth
        body = {"turn": decision.turn, "code_hash": decision.code_hash, "kind": decision.kind.value,
                "approver": decision.approver, "accepted": verdict.accepted,
                "refusal": verdict.refusal.value if verdict.refusal else None, "detail": verdict.detail,
                "policy_version": policy.version, "signed": verdict.signed,
                "signer": auth.signer if auth else None, "key_id": auth.key_id if auth else None,
                "nonce": auth.nonce if auth else None, "signature": auth.signature if auth else None}
        if verdict.accepted and verdict.acceptance and self._review is not None:
            # The requester takes the stored procedure for their request; the review waits on, for an approver.
            self._review = self._review.model_copy(update={"accepted": self._review.review})
            if self._pending is not None:
                self._pending = self._pending.model_copy(update={"requester_accepted": True})
            said = (f"{decision.approver} accepts the stored procedure proposed for their request; it still needs "
                    "approval by someone else")
            self._entry("notice", said, turn=decision.turn, actor=decision.approver, data=body)
            self._audit("stored_procedure_accepted", decision.approver, body)
            return Ack(accepted=True, detail=said)
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
        return Ack(accepted=verdict.accepted, detail=verdict.detail or f"{decision.kind.value} accepted",
                   refusal=verdict.refusal.value if verdict.refusal else None)

    def _record_refusal(self, name: Message, speaker: str, refused: _Refused, nonce: str | None) -> None:
        """The nonce lets a client tell the refusal of its own request from another's, and a copy of its request
        refused as a replay (the first copy was taken) from a refusal of the request itself."""
        body = {"request": name, "refusal": refused.refusal, "detail": refused.detail, "nonce": nonce}
        kind: contract.EntryKind = "refused_decision" if name is Message.DECIDE else "refused_request"
        self._entry(kind, f"{name} from {speaker} refused: {refused.detail}", actor=speaker, data=body)
        self._audit("decision_refused" if name is Message.DECIDE else "request_refused", speaker, body)

    def _remember_nonce(self, auth: Authorization | None) -> None:
        if auth is None:
            return
        now = workflow.now()
        for nonce, expires in list(self._st.seen_nonces.items()):
            if expires <= now:
                del self._st.seen_nonces[nonce]
        self._st.seen_nonces[auth.nonce] = auth.expires_at

    async def _fresh_context(self, max_age: timedelta) -> PolicyContext:
        if self._context is None or workflow.now() - self._context_at > max_age:
            await self._policy_context()
        assert self._context is not None
        return self._context

    def _closing(self) -> bool:
        return self._finalize is not None or self._abandon is not None

    def _touch(self) -> None:
        self._last_touch = workflow.now()

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self._inp.max_history_events

    async def _wait(self, ready: Callable[[], bool]) -> bool:
        """Wait for ``ready`` while serving revokes and audit; False when the session sat idle too long.
        An answer that runs its code next is not held up by an audit activity: its rows go with the run."""
        while True:
            if ready() and self._runs_next():
                return True
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

    def _runs_next(self) -> bool:
        """An accepted ``run_once`` or ``always_ask`` answer: nothing but its run follows (``_remember`` keeps
        no grant for them), and the run writes the rows not written yet, the decision's among them, before its
        code starts (``_execute``), so no audit activity need stand between the two. Revokes waiting are
        served first, as before; ``auto_run`` may store a durable grant before it runs, so its rows are
        written first, as are a rejection's, an edit's and every refusal's."""
        answer = self._answer
        return answer is not None and answer.kind in _RUN_AT_ONCE and not self._st.revokes

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
        if plan.procedures or plan.whole or plan.every:
            st.audit_seq += 1
            revoked = await workflow.execute_activity(
                contract.revoke_grants,
                RevokeGrantsInput(session_id=self._inp.session_id,
                                  grants=[context.grants[n] for n in plan.procedures if n in context.grants],
                                  whole=list(plan.whole), every=plan.every, actor=request.actor,
                                  dedup_key=f"{self._audit_key_prefix()}:revoke:{st.audit_seq}"),
                **contract.STORE_STEP.options(),
            )
            for name in plan.procedures:
                st.grants.pop(name, None)
        what = [short_hash(h) for h in plan.session_hashes] + revoked + (["every durable grant"] if plan.every else [])
        again = ""
        if revoked or plan.every:
            again = (f"; an auto-run answer signed after {grant_again_after(workflow.now()):%H:%M:%S} UTC leaves a "
                     "durable grant again")
        self._entry("revoke", f"revoked by {request.actor}: {', '.join(what) or 'nothing was set'}{again}",
                    actor=request.actor, data={"session_hashes": list(plan.session_hashes), "procedures": revoked})
        self._audit("session_policy_revoked", request.actor,
                    {"target": request.target, "session_hashes": list(plan.session_hashes), "procedures": revoked})

    async def _policy_context(self, codes: Sequence[str] = (), procedures: Sequence[str] = (),
                              predecessor: str | None = None) -> PolicyContext:
        """The deployment's policy, the grants, and the stored bodies ``codes`` and ``procedures`` reach: every
        decision about code reads a context asked for that code (a body outside it counts as absent)."""
        run = workflow.info().first_execution_run_id
        try:
            context: PolicyContext = await workflow.execute_activity(
                contract.policy_context, PolicyContextInput(session_id=self._inp.session_id, run=run,
                                                            codes=list(codes), procedures=list(procedures),
                                                            predecessor=predecessor),
                **contract.POLICY_STEP.options())
        except ActivityError as exc:
            if isinstance(exc.cause, ApplicationError) and exc.cause.type == contract.FOREIGN_PREDECESSOR:
                raise ApplicationError(exc.cause.message, type=contract.FOREIGN_PREDECESSOR, non_retryable=True) from None
            raise
        if context.session_run != run:
            # A closed session's id used again: its signed decisions name this id, turn and hash, and this run
            # has used none of their nonces, so it would accept them a second time. Nothing is decided here.
            raise ApplicationError(f"the session id {self._inp.session_id} belongs to an earlier session; start a "
                                   "new session with an id of its own", type="session_id_taken", non_retryable=True)
        self._st.grants = dict(context.grants)
        self._context, self._context_at = context, workflow.now()
        return context

    async def _decision_context(self, codes: Sequence[str], procedures: Sequence[str]) -> PolicyContext:
        """The context a turn's code is decided against, every revoke accepted so far applied first. Revokes were
        served only while a review waited (``_wait``): one acknowledged while the turn was prepared (the model
        writing its code) was applied after the turn had run, unprompted, on the standing approval it ended."""
        while True:
            while self._st.revokes:
                await self._process_revoke(self._st.revokes.pop(0))
            context = await self._policy_context(codes, procedures)
            if not self._st.revokes:  # none arrived while the context was read: the decision follows at once
                return context

    async def _codegen(self, phase: contract.Phase, request: str) -> CodegenResult:
        return await self._llm(contract.codegen, CodegenInput(
            session_id=self._inp.session_id, phase=phase, request=request, task_id=self._inp.task_id,
            symptom=self._inp.symptom, recent=self._recent(),
        ))

    async def _llm(self, step: Callable[[I], Awaitable[O]], arg: I) -> O:
        """A model step, held to the deployment's budget: once the session's or the turn's spend reached its
        limit no further call starts (the budget arrives with each metered result: a post-call stop-loss)."""
        st = self._st
        budget = st.spend.budget
        if over_budget(st.spend.usd, budget.session_usd):
            raise BudgetSpent(f"the session's model budget is spent (${st.spend.usd:.4f} of ${budget.session_usd:.4f})")
        if over_budget(st.turn_spend, budget.run_usd):
            raise BudgetSpent(f"this turn's model budget is spent (${st.turn_spend:.4f} of ${budget.run_usd:.4f})")
        result: O = await workflow.execute_activity(step, arg, **contract.MODEL_STEP.options())
        spent = getattr(result, "spend", None)
        if spent is not None:
            st.spend = st.spend.plus(spent)
            st.turn_spend = round(st.turn_spend + spent.usd, 6)
            workflow.upsert_search_attributes([SPEND_USD.value_set(st.spend.usd)])
        return result

    async def _guarded(self, work: Awaitable[object]) -> bool:
        """Run a turn; an activity that failed for good ends the turn with a note, never the session."""
        try:
            return bool(await work)
        except ActivityError as exc:
            self._pending = None
            self._review = None
            _publish_pending(None)
            self._entry("system", f"this step failed and was skipped: {_cause(exc)}")
            return False
        except BudgetSpent as exc:
            self._pending = None
            self._review = None
            self._budget_stop(exc, self._st.turn)
            return False

    def _budget_stop(self, exc: BudgetSpent, turn: int) -> None:
        spend = self._st.spend.model_dump()
        self._entry("budget", f"{exc}; no further model call is made", turn=turn, data=spend)
        self._audit("model_budget_stop", "system", {"turn": turn, "reason": str(exc), "spend": spend})

    async def _flush(self) -> None:
        if not self._outbox:
            return
        batch, self._outbox = self._outbox, []
        await workflow.execute_activity(
            contract.audit, AuditBatch(session_id=self._inp.session_id, records=batch), **contract.POLICY_STEP.options())

    def _audit_rows(self, records: list[AuditRecord]) -> list[sandbox.AuditRow]:
        """``records`` as the run writes them: the rows ``contract.audit`` would have written, keys and all."""
        run_id = f"investigate:{self._inp.session_id}"
        return [sandbox.AuditRow(kind=r.kind, actor=r.actor, run_id=run_id, body=r.body, dedup_key=r.dedup_key)
                for r in records]

    def _audit_key_prefix(self) -> str:
        """Audit rows are keyed by the session and its first run (stable across continue-as-new): keyed by the
        session alone, a later run under the same id had its rows taken for the first run's and dropped."""
        return f"{self._inp.session_id}:{workflow.info().first_execution_run_id}"

    def _audit(self, kind: str, actor: str, body: dict[str, Any]) -> None:
        self._st.audit_seq += 1
        self._outbox.append(AuditRecord(kind=kind, actor=actor, body={"session": self._inp.session_id, **body},
                                        dedup_key=f"{self._audit_key_prefix()}:audit:{self._st.audit_seq}"))

    def _entry(self, kind: contract.EntryKind, text: str, *, turn: int | None = None, actor: str | None = None,
               data: dict[str, Any] | None = None) -> None:
        st = self._st
        st.seq += 1
        st.transcript.append(TranscriptEntry(seq=st.seq, at=workflow.now(), kind=kind, text=text, turn=turn,
                                             actor=actor, data=data or {}))
        if len(st.transcript) > TRANSCRIPT_KEEP:
            drop = len(st.transcript) - TRANSCRIPT_KEEP
            del st.transcript[:drop]
            st.dropped_entries += drop

    def _recent(self) -> list[str]:
        wanted = ("operator", "finding", "reply", "notice", "hypothesis")
        return [f"{e.kind}: {e.text[:500]}" for e in self._st.transcript if e.kind in wanted][-8:]


_RUN_AT_ONCE = (DecisionKind.RUN_ONCE, DecisionKind.ALWAYS_ASK)


def pinned_procedures(allow_set: Sequence[str], context: PolicyContext) -> dict[str, str]:
    """The stored procedures a run may call, and those they call in turn, by the hash of the body its decision
    saw: a body changed in the table before the call replays nothing (procedure_tools.PinnedProcedures). The
    review shows nested bodies too; pinned only at the top, a nested one rewritten after the review ran unseen
    and its result steered the approved code."""
    code = context.catalog.procedure_code
    reached = {name for name in allow_set if is_procedure_name(name)}
    for name in sorted(reached):
        if name in code:
            reached.update(reached_procedures(code[name], code))
    # One without stored code when reviewed is pinned as absent: a body written afterwards is not one anybody saw.
    return {name: code_hash(code[name]) if name in code else ABSENT_PROCEDURE for name in sorted(reached)}


def run_tool_names(allow_set: Sequence[str], context: PolicyContext) -> dict[str, str]:
    """Python name -> tool as the review mapped them over its catalogue, for the run's allow-set and for every
    tool the stored procedures it may replay (nested ones too) reference: the run's stub and each replay's are
    built from these (a tool added or dropped since would map a shortened or digest-suffixed name to another)."""
    catalogue = [tool.name for tool in context.catalog.tools]
    conventions = ScanConventions.for_tools(catalogue)
    code = context.catalog.procedure_code
    wanted = set(allow_set)
    for name in pinned_procedures(allow_set, context):
        if name in code:
            wanted.update(scan_code(code[name], conventions).tools)
    return allowed_names(wanted, catalogue)


def handed_over(info: workflow.Info) -> bool:
    """Whether this run's input comes from the session's own continue-as-new. Temporal marks every run that
    follows another with the run it continues, and so are a retry's (``attempt`` above 1) and a cron schedule's
    next run, whose input is the client's start input again, not state the session handed over."""
    return info.continued_run_id is not None and info.attempt == 1 and not info.cron_schedule


def judged_read_only(allow_set: Sequence[str], context: PolicyContext) -> list[str]:
    """The tools of the allow-set the decision's catalogue holds read-only (stored procedures aside: they are
    pinned by body). A run in which one of them reaches a tool that may change state is refused
    (``CodeExecutor``): the review and the run may see different catalogues."""
    facts = context.catalog.by_name()
    return [name for name in allow_set
            if name in facts and facts[name].read_only and facts[name].origin != "procedure"]


_BEFORE_AUTHENTICATION = {
    DecisionRefusal.REPLAYED, DecisionRefusal.NOTHING_PENDING, DecisionRefusal.STALE_TURN,
    DecisionRefusal.HASH_MISMATCH, DecisionRefusal.PREFIX_IN_SIGNED_DECISION, DecisionRefusal.CHOICE_NOT_OFFERED,
    DecisionRefusal.GRANTS_NOT_OFFERED, DecisionRefusal.REVIEW_CHANGED,
}


def _offered_grants(grants: tuple[str, ...], context: PolicyContext,
                    now: datetime) -> tuple[tuple[str, ...], dict[str, datetime]]:
    """The grants a review offers, and those it withholds with when each may be granted again: for a day
    after a revocation (policy.grants.revocation_of) an auto-run answer leaves no grant of the revoked term,
    so offering it promised what the answer would not leave (the transcript said so only afterwards)."""
    withheld = {t: context.withheld_grants[t] for t in grants if context.withheld_grants.get(t, now) > now}
    return tuple(t for t in grants if t not in withheld), withheld


def _auto_run_grants(code: str, decision: ReviewDecision, reuse: ReuseProposal | None,
                     procedure_code: Mapping[str, str]) -> tuple[str, ...]:
    """The durable grants an auto-run answer to this review leaves: the reused procedure when the code is its
    body as bound, or every procedure of code that only replays stored procedures; none for code that changes
    state. The answer names them, so its signature vouches for each (policy.grants.grant_is_signed)."""
    if not decision.read_only or DecisionKind.AUTO_RUN not in decision.choices:
        return ()
    if reuse is not None and is_bound_body(code, reuse.reused, procedure_code):
        return grant_terms([reuse.reused.procedure], procedure_code)
    if decision.tools and all(is_procedure_name(t) and t in procedure_code for t in decision.tools):
        return grant_terms(decision.tools, procedure_code)
    return ()


def _publish_pending(memo: PendingMemo | None) -> None:
    """Say on the server whether a review waits and what a decision must name: the search attribute finds it,
    the memo lets a client sign and signal a decision while no worker runs to answer a query or an update."""
    workflow.upsert_search_attributes([AWAITING_APPROVAL.value_set(memo is not None)])
    workflow.upsert_memo({PENDING_MEMO: memo.model_dump(mode="json") if memo is not None else None})


def _check_size(name: Message, raw: RawValue) -> None:
    """Update validators refuse oversized requests before they enter history (a signal cannot be refused
    that early; its admission refuses it without copying it anywhere)."""
    size, limit = len(raw.payload.data), REQUESTS[name].max_bytes
    if size > limit:
        raise ApplicationError(f"a {name} request of {size} bytes is over the {limit}-byte limit; send a smaller one",
                               type="too_large", non_retryable=True)


def _decode(spec: _Request, raw: RawValue) -> BaseModel:
    size = len(raw.payload.data)
    if size > spec.max_bytes:
        raise _Refused("too_large", f"the request is {size} bytes, over the {spec.max_bytes}-byte limit")
    try:
        data = workflow.payload_converter().from_payload(raw.payload, dict)
    except Exception as exc:  # noqa: BLE001 — any undecodable payload is the sender's error, reported as such
        raise _Refused("malformed", f"the request is not a JSON object ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise _Refused("malformed", "the request must be a JSON object")
    try:
        return spec.model.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}"
                    for e in exc.errors(include_input=False, include_url=False)[:3]]
        raise _Refused("malformed", "invalid request: " + "; ".join(problems)) from None


def _reuse_view(reuse: ReuseProposal) -> ReuseView:
    """What a review and the transcript say about a reused procedure (``ReuseView``)."""
    candidate = reuse.candidate
    diff = ""
    if candidate.previous_code is not None:
        diff = code_diff(candidate.previous_code, candidate.code, f"{candidate.name} (previous version)",
                         f"{candidate.name} (now)")
    return ReuseView(
        procedure=candidate.name, code_hash=candidate.code_hash, parameters=dict(reuse.reused.parameters),
        incidents=list(candidate.incidents), frequency=candidate.frequency, reviewed_by=list(candidate.reviewed_by),
        causes=list(candidate.causes), last_run_at=candidate.last_run_at, last_run_status=candidate.last_run_status,
        versions=candidate.versions, diff_from_previous=diff, similarity=candidate.similarity,
        matched=candidate.matched, summary=candidate.summary,
    )


def _bounded(value: dict[str, Any] | None) -> dict[str, Any] | None:
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
        cause = getattr(cause, "cause")  # a FailureError's; other exceptions stop the loop above
    return (getattr(cause, "message", None) or str(exc))[:500]

