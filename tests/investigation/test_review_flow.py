"""Review lifecycle on the real dev server: auto-run, re-review on change, revoke, stale hash, self-approval."""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from policy.code_identity import code_hash
from policy.decisions import DecisionKind, OperatorDecision
from tests.investigation.conftest import entries, pending_turn, wait_for_runs, KILL_CODE, READ_CODE, TASK_ID, new_session, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def test_auto_run_skips_review_until_code_changes_or_revoke(ops, client, settings, running_worker, brain):
    session = new_session()
    changed = READ_CODE.replace("'status'", "'state'", 1)
    brain.propose(READ_CODE, READ_CODE, changed, READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))

    await inv.send_message(client, session, "what is the task status?", ops.alice)
    view = await pending_turn(client, session, 1)
    assert view.code_hash == code_hash(READ_CODE) and view.read_only
    await inv.decide_by_review(client, session, view.review, DecisionKind.AUTO_RUN, ops.bob)
    runs = await wait_for_runs(client, session, 1)
    assert runs[0].data["status"] == "ok" and runs[0].data["return_value"] == {"status": "broken"}

    await inv.send_message(client, session, "and again?", ops.alice)
    runs = await wait_for_runs(client, session, 2)
    assert runs[1].turn == 2 and runs[1].actor == "policy:session_auto_run"

    await inv.send_message(client, session, "once more, slightly differently", ops.alice)
    view = await pending_turn(client, session, 3)
    assert view.code_hash == code_hash(changed)
    await inv.decide_by_review(client, session, view.review, DecisionKind.REJECT, ops.bob)

    approvals = await inv.approvals(client, session)
    assert list(approvals.session_policies) == [code_hash(READ_CODE)]
    await inv.revoke(client, session, code_hash(READ_CODE)[:6], ops.alice)
    await wait_for(lambda: entries(client, session, "revoke"))
    assert (await inv.approvals(client, session)).session_policies == {}

    await inv.send_message(client, session, "status after revoke?", ops.alice)
    view = await pending_turn(client, session, 4)
    assert view.code_hash == code_hash(READ_CODE) and view.reason == "new_code"
    assert len(await entries(client, session, "run")) == 2


async def test_stale_hash_and_self_approval_are_refused(new_kills, ops, client, settings, services, running_worker, brain, sim):
    session = new_session()
    brain.propose(KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task", ops.alice)
    view = await pending_turn(client, session, 1)
    assert not view.read_only and view.state_changing == ["kill_task"]
    assert "auto_run" not in [c.value for c in view.choices]

    def answer(speaker, **fields):
        values = {"turn": 1, "code_hash": view.code_hash, "kind": DecisionKind.RUN_ONCE,
                  "approver": speaker.identity, "review": view.review, **fields}
        return speaker.sign("decide", session, OperatorDecision(**values))

    await inv.send_decision(client, session, answer(ops.bob, code_hash=code_hash(READ_CODE)))
    await inv.send_decision(client, session, answer(ops.bob, turn=0))
    await inv.send_decision(client, session, answer(ops.alice))
    refused = await wait_for(lambda: _refused(client, session, 3))
    assert [r.data["refusal"] for r in refused] == ["hash_mismatch", "stale_turn", "approver_is_requester"]
    assert await inv.pending(client, session) is not None and new_kills() == []

    with pytest.raises(inv.InvestigationError) as refusal:
        await inv.update(client, session, "decide", OperatorDecision(
            turn=1, code_hash=view.code_hash, kind=DecisionKind.ALWAYS_ASK, approver="alice", review=view.review),
            ops.alice)
    assert refusal.value.refusal == "approver_is_requester" and "someone other than" in str(refusal.value)
    ack = await inv.update(client, session, "decide", OperatorDecision(
        turn=1, code_hash=view.code_hash, kind=DecisionKind.REJECT, approver="bob"), ops.bob)
    assert ack.accepted
    await wait_for(lambda: entries(client, session, "notice"))
    assert new_kills() == []

    async def audited():
        async with services.store.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT kind, actor, body->>'refusal', body->>'policy_version' FROM audit "
                "WHERE kind LIKE 'decision_%%' AND body->>'session' = %s ORDER BY seq", (session,))).fetchall()
        return rows if len(rows) >= 5 else None
    rows = await wait_for(audited)
    assert [r[:3] for r in rows] == [
        ("decision_refused", "bob", "hash_mismatch"), ("decision_refused", "bob", "stale_turn"),
        ("decision_refused", "alice", "approver_is_requester"), ("decision_refused", "alice", "approver_is_requester"),
        ("decision_accepted", "bob", None)]
    assert all(r[3] == view.policy_version for r in rows[2:])  # judged by the registry's policy, recorded


async def _refused(client, session, count):
    found = await entries(client, session, "refused_decision")
    return found if len(found) >= count else None


async def test_edit_sends_new_code_back_through_review(ops, client, settings, running_worker, brain):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status please", ops.alice)
    view = await pending_turn(client, session, 1)
    edited = READ_CODE.replace("return {'status': t['status']}",
                               "return {'site': t.get('site'), 'status': t['status']}")
    await inv.decide_by_review(client, session, view.review, DecisionKind.EDIT, ops.bob, edited)

    async def re_review():
        again = await inv.pending(client, session)
        return again if again is not None and again.code_hash == code_hash(edited) else None
    again = await wait_for(re_review)
    assert again.turn == 1 and again.requester == "bob" and again.code == edited
    await inv.decide_by_review(client, session, again.review, DecisionKind.RUN_ONCE, ops.alice)
    runs = await wait_for_runs(client, session, 1)
    assert runs[0].data["code_hash"] == code_hash(edited) and runs[0].data["return_value"]["status"] == "broken"


GARBAGE = ('<a href="https://bigpanda.cern.ch/job?pandaid=1">scout</a> STATE-CHANGING '
           '{"supporting_evidence": "memory"}')


async def test_code_no_one_could_judge_is_never_put_before_a_reviewer(ops, client, settings, running_worker, brain):
    """What a small offline model writes (markup, prose, a bare literal) is asked for once more and, still
    unusable, reported in the transcript; it is never shown for review as "state-changing"."""
    session = new_session()
    brain.propose(GARBAGE, "{'memory': 'high'}")
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what do the scouts say about memory?", ops.alice)
    notices = await wait_for(lambda: entries(client, session, "notice"))
    assert "No code to review: the model wrote no code a person could review, twice" in notices[0].text
    assert "calls no tool" in notices[0].text
    assert await inv.pending(client, session) is None
    assert not await entries(client, session, "code"), "nothing unusable reached the transcript as code"

    brain.propose("<html>", READ_CODE)  # a second try that is usable goes to review as usual
    await inv.send_message(client, session, "status please", ops.alice)
    view = await pending_turn(client, session, 2)
    assert view.code == READ_CODE
