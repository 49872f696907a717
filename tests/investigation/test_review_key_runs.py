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

import uuid

import pytest
from temporalio.common import WorkflowIDReusePolicy

from bamboo.investigation import client as inv
from bamboo.contract import Queue
from bamboo.investigation.contract import PENDING_MEMO, WORKFLOW_NAME, Message, PendingMemo, PendingView
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
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:8]}", memo={PENDING_MEMO: memo.model_dump(mode="json")})
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
    monkeypatch.setattr(inv, "_query", answer)
    with pytest.raises(inv.InvestigationError, match="does not hash to the hash an approval would sign"):
        await inv.pending(None, "s")  # type: ignore[arg-type]
