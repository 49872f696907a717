"""Investigation with its model, store and sandbox activities faked: who may let a block run, read through the
session's public messages (signed, as every client sends them), queries and result."""

from __future__ import annotations

import uuid
from collections import deque
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle

from bamboo.approvals.keys import LocalKey
from bamboo.contract import implements
from bamboo.investigation import contract
from bamboo.investigation.contract import (
    AuditBatch, CodegenInput, CodegenResult, FinalizeInput, FinalizeRequest, FinalizeResult, GrantInput,
    IntentInput, IntentResult, InvestigationResult, InvestigationStart, Message, OperatorMessage, PendingView,
    PolicyContext, PolicyContextInput, ProcedureRun, Query, ReuseCandidates, ReuseQuery, RevokeGrantsInput,
    SessionStatus, SummaryInput, SummaryResult, TranscriptEntry, WrittenProcedures, WrittenQuery,
)
from bamboo.sandbox import contract as sandbox
from bamboo.sandbox.contract import ExecuteCodeInput, SandboxRunResult
from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.catalog import ToolCatalog, ToolFacts
from policy.decisions import DecisionKind, OperatorDecision
from policy.signing import DEFAULT_DEPLOYMENT
from tests.workflows.conftest import until, workers
from workflows.investigation import Investigation

TASK = 40112233
READ_CODE = "t = await tools.get_task_details(task_id=task_id)\nreturn {'status': t['status']}"
KILL_CODE = "r = await tools.kill_task(task_id=task_id)\nreturn {'killed': r['accepted']}"
CATALOG = ToolCatalog.build([ToolFacts(name="get_task_details", read_only=True), ToolFacts(name="kill_task")])
KEYS = {name: LocalKey(name, Ed25519PrivateKey.generate()) for name in ("alice", "bob")}
POLICY = DeploymentPolicy(
    rules=ApprovalRules(require_signatures=True, require_distinct_approver=True),
    approvers=tuple(RegisteredKey(identity=name, public_key=key.public_key,
                                  roles=frozenset({Role.REQUEST, Role.APPROVE, Role.APPROVE_STATE_CHANGING}))
                    for name, key in KEYS.items()))


class FakeSession:
    """The activities of a session: the deployment's policy and catalogue, a model that proposes the code a
    test queued, an empty procedure store, and a sandbox that records what reached it."""

    def __init__(self, *codes: str) -> None:
        self.codes = deque(codes)
        self.runs: list[ExecuteCodeInput] = []
        self.finalized: list[FinalizeInput] = []
        self.session_ids: dict[str, str] = {}
        self.declined = ""  # the model's own reason when it writes no code (else the workflow's "nothing scripted")

    @implements(contract.policy_context)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        # the store's rule (bamboo.store.first_claims): the first run to ask holds the session id, for good
        return PolicyContext(session_run=self.session_ids.setdefault(inp.session_id, inp.run), catalog=CATALOG,
                             policy=POLICY)

    @implements(contract.reuse_candidates)
    async def reuse_candidates(self, inp: ReuseQuery) -> ReuseCandidates:
        return ReuseCandidates()

    @implements(contract.written_procedures)
    async def written_procedures(self, inp: WrittenQuery) -> WrittenProcedures:
        return WrittenProcedures()

    @implements(contract.intent)
    async def intent(self, inp: IntentInput) -> IntentResult:
        return IntentResult(intent="tool", confidence=0.9, reason="scripted")

    @implements(contract.codegen)
    async def codegen(self, inp: CodegenInput) -> CodegenResult:
        if not self.codes:
            if self.declined:
                return CodegenResult(code=None, reason=self.declined, reason_by_model=True)
            return CodegenResult(code=None, reason="nothing scripted")
        return CodegenResult(code=self.codes.popleft(), summary="scripted step")

    @implements(contract.summary)
    async def summary(self, inp: SummaryInput) -> SummaryResult:
        return SummaryResult(reply=f"run {inp.status}", result_summary=f"status {inp.status}")

    @implements(contract.audit)
    async def audit(self, batch: AuditBatch) -> int:
        return len(batch.records)

    @implements(contract.grant)
    async def grant(self, inp: GrantInput) -> list[str]:
        return [g.procedure for g in inp.grants]

    @implements(contract.revoke_grants)
    async def revoke_grants(self, inp: RevokeGrantsInput) -> list[str]:
        return list(inp.procedures)

    @implements(contract.procedure_ran)
    async def procedure_ran(self, inp: ProcedureRun) -> bool:
        return True

    @implements(contract.finalize)
    async def finalize(self, inp: FinalizeInput) -> FinalizeResult:
        self.finalized.append(inp)
        return FinalizeResult(cause=inp.cause, resolution=inp.resolution)

    @implements(sandbox.execute_code)
    async def execute_code(self, inp: ExecuteCodeInput) -> SandboxRunResult:
        self.runs.append(inp)
        return SandboxRunResult(run_id=inp.run_id, status="ok", isolation="bwrap", return_value={"done": True})

    def activities(self) -> list:
        return [self.policy_context, self.reuse_candidates, self.written_procedures, self.intent, self.codegen,
                self.summary, self.audit, self.grant, self.revoke_grants, self.procedure_ran, self.finalize,
                self.execute_code]


class Session:
    """One session as a client drives it: every request signed by its sender's key and sent as a signal."""

    def __init__(self, handle: WorkflowHandle, session_id: str) -> None:
        self.handle, self.id = handle, session_id

    async def send(self, name: Message, request: BaseModel, signer: str) -> None:
        auth = KEYS[signer].authorize(contract.MESSAGE_KINDS[name], self.id, request.signed_body(), deployment=DEFAULT_DEPLOYMENT)  # type: ignore[attr-defined]
        await self.handle.signal(name.value, request.model_copy(update={"auth": auth}))

    async def ask(self, author: str, text: str) -> None:
        await self.send(Message.MESSAGE, OperatorMessage(text=text, author=author), author)

    async def decide(self, approver: str, review: PendingView, kind: DecisionKind) -> None:
        decision = OperatorDecision(turn=review.turn, code_hash=review.code_hash, kind=kind, approver=approver,
                                    review=review.review)
        await self.send(Message.DECIDE, decision, approver)

    async def pending(self, turn: int) -> PendingView:
        """The review of ``turn`` once it waits for a decision."""
        return await until(lambda: self.handle.query(Query.PENDING.value, result_type=PendingView | None),
                           lambda view: view is not None and view.turn == turn)

    async def entries(self, kind: str, count: int = 1) -> list[TranscriptEntry]:
        """The transcript's entries of ``kind``, once there are ``count`` of them."""
        async def of_kind() -> list[TranscriptEntry]:
            found = await self.handle.query(Query.TRANSCRIPT.value, 0, result_type=list[TranscriptEntry])
            return [e for e in found if e.kind == kind]
        return await until(of_kind, lambda found: len(found) >= count)


async def open_session(client: Client, queue: str, requester: str = "alice") -> Session:
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    start = InvestigationStart(session_id=session_id, requester=requester, task_id=TASK, startup_hypothesis=False)
    handle = await client.start_workflow(Investigation.run, start, id=contract.workflow_id(session_id),
                                         task_queue=queue)
    return Session(handle, session_id)


async def test_an_approved_read_runs_once_in_the_sandbox_and_is_kept_at_finalize(temporal: Client) -> None:
    fake = FakeSession(READ_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue)
        await session.ask("alice", "what is the task's status?")
        review = await session.pending(turn=1)
        assert review.read_only and review.tools == ["get_task_details"]
        await session.decide("alice", review, DecisionKind.RUN_ONCE)  # a read may be approved by its requester
        [run] = await session.entries("run")
        assert run.data["status"] == "ok" and run.actor == "alice"
        [decision] = await session.entries("decision")
        assert decision.actor == "alice" and decision.data["code_hash"] == review.code_hash
        await session.send(Message.FINALIZE, FinalizeRequest(cause="a cause", resolution="a fix", actor="alice"),
                           "alice")
        result: InvestigationResult = await session.handle.result()
    assert (result.status, result.turns, result.cause) == (SessionStatus.FINALIZED, 1, "a cause")
    [ran] = fake.runs
    assert READ_CODE in ran.code and ran.allowed_tools == ["get_task_details"] and ran.phase == "interactive"
    [finalized] = fake.finalized
    assert [c.code for c in finalized.captured] == [READ_CODE]


async def test_a_state_changing_block_waits_for_an_approver_other_than_its_requester(temporal: Client) -> None:
    fake = FakeSession(KILL_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue)
        await session.ask("alice", "kill the task")
        review = await session.pending(turn=1)
        assert not review.read_only and review.state_changing == ["kill_task"]

        await session.decide("alice", review, DecisionKind.RUN_ONCE)
        [refused] = await session.entries("refused_decision")
        assert refused.actor == "alice"
        # Still waiting on the same code, and nothing reached the sandbox.
        still = await session.pending(turn=1)
        assert still.code_hash == review.code_hash
        assert fake.runs == []

        await session.decide("bob", review, DecisionKind.RUN_ONCE)
        [run] = await session.entries("run")
        assert run.actor == "bob"
    [ran] = fake.runs
    assert KILL_CODE in ran.code and "kill_task" in ran.allowed_tools and ran.actor == "bob"
    # the run names the signed decision it acts on: recorded as used by this workflow run before the code starts
    assert ran.decision is not None and ran.decision.session_id == session.id and len(ran.decision.nonce) >= 32


async def test_the_review_shows_the_text_the_sandbox_runs(temporal: Client) -> None:
    """A form feed in an indentation, or a lone carriage return, made the code every view drew differ from the
    code Python ran (a kill drawn under a branch never taken ran every time). The review holds the normal form,
    the text the sandbox runs, and the run is sent that text."""
    fed = ("t = await tools.get_task_details(task_id=task_id)\nif t['status'] == 'none':\n    print('never')\n"
           "    \fr = await tools.kill_task(task_id=task_id)  # only then\rreturn 1")
    fake = FakeSession(fed)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue)
        await session.ask("alice", "look at the task")
        review = await session.pending(turn=1)
        assert review.code.split("\n")[3:] == ["r = await tools.kill_task(task_id=task_id)  # only then", "return 1"]
        assert review.state_changing_lines == {"kill_task": [4]}
        await session.decide("bob", review, DecisionKind.RUN_ONCE)
        await session.entries("run")
    [ran] = fake.runs
    assert review.code in ran.code


async def test_no_model_reply_reads_as_one_of_the_workflow_s_notices(temporal: Client) -> None:
    """Notices are the workflow's own word that a turn ended without a run; the model's words, even word for word
    the same, are a reply. Each front end labels an entry by its kind, so the kind is what tells them apart."""
    forged = "Rejected by bob; the code did not run."
    fake = FakeSession(KILL_CODE)
    fake.declined = forged
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue)
        await session.ask("alice", "kill the task")
        await session.decide("bob", await session.pending(turn=1), DecisionKind.REJECT)
        await session.ask("alice", "and now?")  # the model writes no code, and says why in the notice's words
        notices = await session.entries("notice", count=2)
        assert [(n.turn, n.text) for n in notices] == [
            (1, forged), (2, "No code to review: the model wrote none this turn.")]
        assert [(r.turn, r.text) for r in await session.entries("reply")] == [(2, forged)]
    assert not fake.runs


async def test_the_session_s_opening_line_says_its_requester_is_named_unsigned(temporal: Client) -> None:
    """Whoever may start workflows may name anyone as a session's requester: the transcript's first line, which the
    console shows on the session's page, says the name is the start's, unsigned (review: it read as fact)."""
    fake = FakeSession()
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue, requester="bob")
        [opened] = await session.entries("system")
    assert opened.text == (f"session {session.id} opened, naming bob as its requester (the start is not signed; "
                           "every request in it is)")


async def test_a_rejected_block_never_reaches_the_sandbox(temporal: Client) -> None:
    fake = FakeSession(KILL_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session = await open_session(temporal, queue)
        await session.ask("alice", "kill the task")
        review = await session.pending(turn=1)
        await session.decide("bob", review, DecisionKind.REJECT)
        [notice] = await session.entries("notice")
        assert "did not run" in notice.text
        await session.send(Message.FINALIZE, FinalizeRequest(cause="a cause", resolution="none", actor="alice"),
                           "alice")
        result: InvestigationResult = await session.handle.result()
    # The session is over: no run of the rejected code can come later.
    assert result.status is SessionStatus.FINALIZED
    assert fake.runs == []
    assert fake.finalized[0].captured == []


async def test_carried_state_from_anyone_but_the_sessions_own_continue_as_new_is_refused(temporal: Client) -> None:
    """Whoever may start a session (every requester's CLI does) could hand it a carried state: an inbox of unsigned
    messages under any author, so that alice's own request for a kill was "bob's" and alice approved it herself.
    A start that carries state fails before any turn, and nothing reaches the sandbox."""
    import asyncio

    from temporalio.client import WorkflowFailureError

    from bamboo.investigation.contract import InvestigationState

    fake = FakeSession(KILL_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        session_id = f"test-{uuid.uuid4().hex[:10]}"
        forged = InvestigationState(inbox=[OperatorMessage(text="kill the task", author="bob")])
        handle = await temporal.start_workflow(
            Investigation.run, InvestigationStart(session_id=session_id, requester="alice", task_id=TASK,
                                                  startup_hypothesis=False, carried=forged),
            id=contract.workflow_id(session_id), task_queue=queue)
        try:
            await asyncio.wait_for(handle.result(), 60)  # before the fix: a review, waiting for an approval
        except WorkflowFailureError as exc:
            assert getattr(exc.cause, "type", None) == "forged_carried_state", exc.cause
        else:
            raise AssertionError("a start with carried state ran")
    assert fake.runs == [] and fake.codes == deque([KILL_CODE]), "no code was generated or run"


async def test_a_new_run_under_a_closed_sessions_id_accepts_none_of_its_decisions(temporal: Client) -> None:
    """Decisions are signed over the session id, turn and hash, and a session keeps the nonces it used in its own
    state: a new run under a closed session's id (Temporal lets an id be used again) started with none used and
    turns from one, so bob's one approval of a kill ran two. The first run holds the id; the second decides
    nothing and fails."""
    import asyncio

    from temporalio.client import WorkflowFailureError
    from temporalio.common import WorkflowIDReusePolicy

    from bamboo.investigation.contract import AbandonRequest

    fake = FakeSession(KILL_CODE, KILL_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        first = await open_session(temporal, queue)
        await first.ask("alice", "kill the task")
        review = await first.pending(turn=1)
        unsigned = OperatorDecision(turn=1, code_hash=review.code_hash, kind=DecisionKind.RUN_ONCE, approver="bob",
                                    review=review.review)
        bobs = unsigned.model_copy(update={"auth": KEYS["bob"].authorize(
            contract.MESSAGE_KINDS[Message.DECIDE], first.id, unsigned.signed_body(), deployment=DEFAULT_DEPLOYMENT)})
        await first.handle.signal(Message.DECIDE.value, bobs)
        await first.entries("run")
        abandon = AbandonRequest(actor="alice")
        abandon = abandon.model_copy(update={"auth": KEYS["alice"].authorize(
            contract.MESSAGE_KINDS[Message.ABANDON], first.id, abandon.signed_body(), deployment=DEFAULT_DEPLOYMENT)})
        await first.handle.signal(Message.ABANDON.value, abandon)
        await first.handle.result()

        start = InvestigationStart(session_id=first.id, requester="alice", task_id=TASK,
                                   startup_hypothesis=False)
        handle = await temporal.start_workflow(Investigation.run, start, id=contract.workflow_id(first.id),
                                               task_queue=queue, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        again = Session(handle, first.id)
        await again.ask("alice", "kill the task")
        await handle.signal(Message.DECIDE.value, bobs)  # the first run's decision, copied from its history
        try:
            await asyncio.wait_for(handle.result(), 60)
        except WorkflowFailureError as exc:
            assert getattr(exc.cause, "type", None) == "session_id_taken", exc.cause
        else:
            raise AssertionError("the second run under the id ended without refusing")
    assert [run.actor for run in fake.runs] == ["bob"], "one approval, one run"


def test_only_a_continue_as_new_hands_state_over_never_a_retry_or_a_schedule() -> None:
    """A start with carried state and a cron schedule (or a retry policy and a run that timed out) gets a next run
    that Temporal marks as continuing the first, with the client's input again: its carried state is still the
    client's, not the session's."""
    from types import SimpleNamespace

    from workflows.investigation import handed_over

    def info(continued: str | None, attempt: int = 1, cron: str = "") -> SimpleNamespace:
        return SimpleNamespace(continued_run_id=continued, attempt=attempt, cron_schedule=cron)

    assert handed_over(info("run-1"))  # type: ignore[arg-type]
    for started in (info(None), info("run-1", attempt=2), info("run-1", cron="* * * * *")):
        assert not handed_over(started)  # type: ignore[arg-type]
