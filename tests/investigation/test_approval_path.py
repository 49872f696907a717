"""The approval path (issue 25): an accepted decision's audit row travels with the run it authorises. The
sandbox activity writes it, under the workflow's dedup key, before the code starts; no audit activity stands
between the decision and its run; a retried run writes it once; a rejection is still written on its own."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.audit import MemoryBlobSink
from bamboo.investigation import client as inv
from bamboo.sandbox.contract import AuditRow, ExecuteCodeInput
from bamboo.sandbox.runner import SandboxRunner
from policy.decisions import DecisionKind
from tests.investigation.conftest import READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for, wait_for_runs
from tests.sandbox.conftest import HAS_BWRAP, MemoryToolCaller, unique_limits

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def _rows(services, sql: str, *args):
    async with services.store.pool.connection() as conn:
        return await (await conn.execute(sql, args)).fetchall()


async def _activities_after_the_decision(client, session) -> list[tuple[str, dict]]:
    """The activities scheduled after the decide update was accepted, in order, each with its input."""
    history = await inv.handle(client, session).fetch_history()
    found, accepted = [], False
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = True
        elif accepted and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            found.append((attrs.activity_type.name, json.loads(attrs.input.payloads[0].data)))
    return found


async def test_the_decision_row_is_written_by_its_run_before_the_first_tool_call(
        ops, client, settings, services, running_worker, brain):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what is the task status?", ops.alice)
    view = await pending_turn(client, session, 1)
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    [run] = await wait_for_runs(client, session, 1)
    assert run.data["status"] == "ok"

    rows = await _rows(services, "SELECT seq, kind, dedup_key FROM audit WHERE (kind = 'decision_accepted' AND "
                       "body->>'session' = %s) OR (kind = 'tool_call' AND run_id = %s) ORDER BY seq",
                       session, run.data["run_id"])
    kinds = [r[1] for r in rows]
    assert kinds[0] == "decision_accepted" and "tool_call" in kinds, kinds  # in the table before the first call
    decision_key = rows[0][2]
    first_run = (await inv.handle(client, session).describe()).raw_description.workflow_execution_info.first_run_id
    assert decision_key.startswith(f"{session}:{first_run}:audit:"), decision_key  # the session and its first run

    after = await _activities_after_the_decision(client, session)
    names = [name for name, _ in after]
    run_at = names.index("execute_code")
    assert "investigation_audit" not in names[:run_at], names  # nothing between the decision and its run
    carried = after[run_at][1]["audit"]
    assert [(r["kind"], r["dedup_key"]) for r in carried][-1:] == [("decision_accepted", decision_key)]
    assert carried[-1]["run_id"] == f"investigate:{session}" and carried[-1]["actor"] == "bob"
    written = await _rows(services, "SELECT count(*) FROM audit WHERE dedup_key = %s", decision_key)
    assert written[0][0] == 1


async def test_a_rejection_is_still_written_on_its_own(ops, client, settings, services, running_worker, brain):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what is the task status?", ops.alice)
    view = await pending_turn(client, session, 1)
    await inv.decide_by_review(client, session, view.review, DecisionKind.REJECT, ops.bob)
    await wait_for(lambda: entries(client, session, "notice"))

    async def audited():
        return await _rows(services, "SELECT kind FROM audit WHERE kind = 'decision_accepted' AND "
                           "body->>'session' = %s AND body->>'kind' = 'reject'", session)
    assert await wait_for(audited)
    names = [name for name, _ in await _activities_after_the_decision(client, session)]
    assert "investigation_audit" in names and "execute_code" not in names, names


async def test_a_retried_run_writes_its_rows_once(services):
    """A worker lost after the rows were written: the next attempt writes them again under the same keys, and
    the store keeps one of each."""
    session = f"retry-{uuid.uuid4().hex[:10]}"
    rows = [AuditRow(kind=kind, actor=actor, run_id=f"investigate:{session}", body={"session": session, "turn": 1},
                     dedup_key=f"{session}:audit:{seq}")
            for seq, (kind, actor) in enumerate([("review_decided", "policy"), ("decision_accepted", "bob")], 1)]
    runner = SandboxRunner(isolation="bwrap" if HAS_BWRAP else "degraded", limits=unique_limits())
    acts = SandboxActivities(runner=runner, caller=MemoryToolCaller(), audit=services.store.audit,
                             blobs=MemoryBlobSink())
    try:
        for attempt in (1, 2):
            env = ActivityEnvironment()
            env.info = dataclasses.replace(env.info, attempt=attempt)
            out = await env.run(acts.execute_code, ExecuteCodeInput(
                run_id=f"investigate:{session}:t1:abc:{attempt}", code="return {'ok': True}",
                allowed_tools=["get_task"], read_only_tools=["get_task"], phase="interactive", actor="bob",
                audit=rows))
            assert out.status == "ok", out.error
    finally:
        await runner.close()
    found = await _rows(services, "SELECT kind, dedup_key FROM audit WHERE dedup_key LIKE %s ORDER BY seq",
                        f"{session}:audit:%")
    assert found == [("review_decided", f"{session}:audit:1"), ("decision_accepted", f"{session}:audit:2")]


async def test_a_signed_decision_runs_code_in_one_workflow_run_ever(services):
    """A Temporal reset rolls a session back (its record of used nonces with it) and re-sends the signals after the
    reset point, so the reset run accepted bob's one signed approval again and ran the kill a second time. The
    decision's nonce is recorded with the run before its code starts: a retry of the same activity (the same run)
    goes on, another run is refused, and a worker that cannot record it runs nothing a decision authorises."""
    from temporalio.exceptions import ApplicationError

    from bamboo.sandbox.contract import SANDBOX_REFUSED, UsedDecision
    from bamboo.store.first_claims import UsedDecisions

    session = f"reset-{uuid.uuid4().hex[:10]}"
    runner = SandboxRunner(isolation="bwrap" if HAS_BWRAP else "degraded", limits=unique_limits())
    recorded = SandboxActivities(runner=runner, caller=MemoryToolCaller(), audit=services.store.audit,
                                 blobs=MemoryBlobSink(), used_decisions=UsedDecisions(services.store.pool))
    unrecorded = SandboxActivities(runner=runner, caller=MemoryToolCaller(), audit=services.store.audit,
                                   blobs=MemoryBlobSink())
    run = ExecuteCodeInput(run_id=f"investigate:{session}:t1:abc:1", code="return {'ok': True}",
                           allowed_tools=["get_task"], read_only_tools=["get_task"], phase="interactive", actor="bob",
                           decision=UsedDecision(nonce="ab" * 16, session_id=session))

    async def attempt(acts, workflow_run: str, number: int = 1):
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, attempt=number, workflow_run_id=workflow_run)
        return await env.run(acts.execute_code, run)

    try:
        assert (await attempt(recorded, "run-before-reset")).status == "ok"
        assert (await attempt(recorded, "run-before-reset", number=2)).status == "ok"  # the same run, retried
        for acts, run_id, said in ((recorded, "run-after-reset", "was used by another run"),
                                   (unrecorded, "run-before-reset", "cannot record a decision as used")):
            with pytest.raises(ApplicationError) as refused:
                await attempt(acts, run_id)
            assert refused.value.type == SANDBOX_REFUSED and refused.value.non_retryable, refused.value
            assert said in str(refused.value), refused.value
    finally:
        await runner.close()
