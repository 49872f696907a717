"""A look-alike of a session gets nothing signed, and an approval given to one counts in no real session.

The attack, end to end on the real server: a requester learns the review key of state-changing code in a session
of their own; starts a workflow of the product's type under a session id nobody used, on a queue no worker of
ours polls, with a memo saying a read-only review of that key waits; an approver answers it from the memo (no
worker answers the query there), and the signed answer sits in that run's history. The requester ends the run,
starts a real session under the same id with the same code pending, and sends the answer again while it is
still valid. The review key used to be the same in every session, so the kill ran. Our clients now refuse to
sign for, or read the memo of, a run our workers do not run (``bamboo.investigation.client.genuine``), and the
review key names the session's run, so an answer signed for the look-alike some other way is refused too.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.worker import Worker

from bamboo.investigation import client as inv
from bamboo.contract import AWAITING_APPROVAL, KIND, Kind, Queue
from bamboo.investigation.contract import (
    FOREIGN_PREDECESSOR, PENDING_MEMO, WORKFLOW_NAME, InvestigationStart, InvestigationState, Message, OperatorMessage,
    PendingMemo, PendingView,
)
from policy.decisions import DecisionKind, OperatorDecision
from tests.investigation.conftest import KILL_CODE, READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def test_an_approval_given_to_a_look_alike_run_is_refused_in_the_real_session(
        ops, client, settings, running_worker, brain, new_kills):
    brain.propose(KILL_CODE)
    own = new_session()
    await inv.start(client, inv.start_input(settings, own, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, own, "kill the task", ops.alice)
    learned = await pending_turn(client, own, 1)

    target = new_session()
    memo = PendingMemo(turn=1, code_hash=learned.code_hash, requester="alice", read_only=True, task_id=TASK_ID,
                       choices=[DecisionKind.RUN_ONCE, DecisionKind.REJECT], review=learned.review)
    look_alike = await client.start_workflow(
        WORKFLOW_NAME, inv.start_input(settings, target, "alice", task_id=TASK_ID), id=inv.workflow_id(target),
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:8]}", memo={PENDING_MEMO: memo.model_dump(mode="json")},
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, Kind.INVESTIGATE.value),
                                                 SearchAttributePair(AWAITING_APPROVAL, True)]))

    async def visible():  # the listing reads the server's visibility store, which lags a start (by attributes
        # alone: the client's own list also names our type and queue, so it never finds the look-alike)
        return [e async for e in client.list_workflows(
            f"{KIND.name} = '{Kind.INVESTIGATE}' AND {AWAITING_APPROVAL.name} = true AND WorkflowId = '{look_alike.id}'")]
    await wait_for(visible)
    unanswered: list[str] = []
    listed = await inv.list_pending(client, unanswered=unanswered, timeout_s=2.0)
    assert target not in [p.session_id for p in listed] + unanswered  # nothing of it is shown
    with pytest.raises(inv.NotASession):
        await inv.pending(client, target)
    # Our clients sign nothing for a run our workers do not run, nor read its memo.
    with pytest.raises(inv.InvestigationError, match="not an investigation run by this deployment's workers"):
        await inv.decide_by_review(client, target, learned.review, DecisionKind.RUN_ONCE, ops.carol,
                                   query_timeout_s=2.0)
    with pytest.raises(inv.InvestigationError, match="not an investigation run by this deployment's workers"):
        await inv.pending_memo(client, target)
    assert [e async for e in look_alike.fetch_history_events()
            if e.HasField("workflow_execution_signaled_event_attributes")] == []
    # An answer signed some other way (`bamboo sign decide` with everything given) names the look-alike's review.
    answer = ops.carol.sign(Message.DECIDE, target, OperatorDecision(
        turn=1, code_hash=learned.code_hash, kind=DecisionKind.RUN_ONCE, approver="carol", review=learned.review))
    await look_alike.signal(Message.DECIDE.value, answer)
    await look_alike.terminate("the requester ends the look-alike")

    brain.propose(KILL_CODE)
    # The product's client refuses a used session id; the requester's own client asks the server to allow it.
    await client.start_workflow(WORKFLOW_NAME, inv.start_input(settings, target, "alice", task_id=TASK_ID,
                                                               startup_hypothesis=False),
                                id=inv.workflow_id(target), task_queue=Queue.MAIN,
                                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
    await inv.send_message(client, target, "kill the task", ops.alice)
    real = await pending_turn(client, target, 1)
    assert real.code_hash == learned.code_hash
    await client.get_workflow_handle(inv.workflow_id(target)).signal(Message.DECIDE.value, answer)

    async def judged():
        return await entries(client, target, "refused_decision") or await entries(client, target, "run")
    judgement = await wait_for(judged)
    assert [(e.kind, e.data.get("refusal")) for e in judgement] == [("refused_decision", "review_changed")]
    assert await inv.pending(client, target) is not None and new_kills() == []
    assert real.review != learned.review


async def test_a_review_whose_code_does_not_hash_to_its_hash_is_never_shown(monkeypatch):
    """What answers the query is checked before anyone sees it: another's worker showed harmless code beside
    the hash of a kill."""
    from policy.code_identity import code_hash

    forged = PendingView(session_id="s", turn=1, code_hash=code_hash(KILL_CODE), code=READ_CODE, review="a" * 64,
                         requester="alice", read_only=True, summary="", reason="", detail="",
                         choices=[DecisionKind.RUN_ONCE])

    async def answer(*args, **kwargs):
        return forged

    async def ours(*args, **kwargs):  # the workflow is an investigation on our queue: a worker of someone else's
        return SimpleNamespace(run_id="r")  # answers its queries (the rogue worker the trust model names)
    monkeypatch.setattr(inv, "_query", answer)
    monkeypatch.setattr(inv, "genuine", ours)
    with pytest.raises(inv.InvestigationError, match="does not hash to the hash an approval would sign"):
        await inv.pending(None, "s")  # type: ignore[arg-type]


@workflow.defn(name="RequestersOwnWorkflow", sandboxed=False)
class HandsOver:
    """A requester's own workflow, on a queue of their own, that continues-as-new into a real session."""

    @workflow.run
    async def run(self, start: InvestigationStart, memo: dict) -> None:
        workflow.continue_as_new(start, workflow=WORKFLOW_NAME, task_queue=Queue.MAIN, memo=memo)


async def _handed_over(client, start: InvestigationStart, memo: dict | None = None):
    """Run ``HandsOver`` under the session's id on a queue of the requester's own, until it has handed over."""
    own_queue = f"requesters-own-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=own_queue, workflows=[HandsOver]):
        await client.start_workflow(HandsOver.run, args=[start, memo or {}], id=inv.workflow_id(start.session_id),
                                    task_queue=own_queue)

        async def ours():
            return (await client.get_workflow_handle(inv.workflow_id(start.session_id)).describe()).workflow_type \
                == WORKFLOW_NAME
        await wait_for(ours)
    return client.get_workflow_handle(inv.workflow_id(start.session_id))


async def test_a_run_continued_from_a_requesters_own_workflow_adopts_nothing_and_fails(
        ops, client, settings, running_worker, brain, new_kills):
    """Temporal marks a run continued from any workflow's continue-as-new: the requester's workflow handed a real
    session an inbox of unsigned messages under bob's name, so the requester approved her own kill as his."""
    brain.propose(KILL_CODE)
    session = new_session()
    forged = InvestigationState(inbox=[OperatorMessage(text="kill the task", author="bob")])  # unsigned
    start = inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False)
    real = await _handed_over(client, start.model_copy(update={"carried": forged}))
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(real.result(), 60)
    assert getattr(failed.value.cause, "type", None) == FOREIGN_PREDECESSOR
    assert new_kills() == []


async def test_no_client_believes_a_memo_handed_over_by_a_requesters_own_workflow(ops, client, settings):
    """The handed-over run is ours in type and queue, and until it starts no worker answers for it: its memo, the
    requester's, said a read-only review with a key naming the requester's first run was pending."""
    session = new_session()
    memo = PendingMemo(turn=1, code_hash="a" * 64, requester="alice", read_only=True, review="b" * 64)
    start = inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False)
    handle = await _handed_over(client, start, {PENDING_MEMO: memo.model_dump(mode="json")})
    try:
        with pytest.raises(inv.InvestigationError, match="not an investigation run by this deployment's workers"):
            await inv.pending_memo(client, session)
        with pytest.raises(inv.InvestigationError, match="not an investigation run by this deployment's workers"):
            await inv.decide_by_review(client, session, "b" * 64, DecisionKind.RUN_ONCE, ops.carol, query_timeout_s=1)
    finally:
        await handle.terminate("test finished")
