"""Reuse before regenerate and signature de-duplication, on the real stack (issue 26): Temporal, Postgres, the
sandbox, the PanDA simulator and a scripted model that counts its calls.

A stored procedure that fits a turn is proposed without a code-generation call and runs only after review; a
state-changing one runs only once its requester accepted it and someone else approved it (a planted one is not
approved by its planter alone); one that no longer fits (a tool gone, another cause) is not proposed; two
captures of equivalent code under one signature are one procedure whose frequency and incidents grow; a changed
body under a granted signature is shown as a diff and runs only after review.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bamboo.frontends.review import notes

from bamboo.investigation import client as inv
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.investigation.provenance import Capture
from policy.code_identity import code_hash
from policy.decisions import DecisionKind
from policy.grants import grant_matches
from policy.reuse import bind
from tests.investigation.conftest import (
    KILL_PROC, KILL_PROC_CODE, READ_CODE, READ_PROC, READ_PROC_CODE, TASK_ID, entries, new_session, pending_turn,
    signed_grant, wait_for, wait_for_runs,
)

pytestmark = pytest.mark.usefixtures("terminate_sessions")

ASK_JOBS = "how are the task's jobs doing?"
ASK_STOP = "stop this task now, it only wastes slots"
CODEGEN = "InvestigationCode"
# READ_PROC_CODE as another session might have written it: other spacing, a comment; the same syntax tree.
READ_PROC_REFORMATTED = ("t = await tools.get_task_details(task_id = task_id)   # the task record\n\n"
                         "j = await tools.get_task_jobs_summary(task_id=task_id)\n"
                         "return {'status': t['status'], 'jobs': len(j)}")
READ_PROC_CHANGED = READ_PROC_CODE.replace("len(j)", "len(j['failed_job_ids'])")


def codegen_calls(llm_server) -> int:
    return llm_server.counts_by_schema().get(CODEGEN, 0)


async def _store(services, name: str, code: str, triggers: tuple[str, ...], **provenance) -> ProcedureRepository:
    repo = ProcedureRepository(services.store.pool)
    await repo.capture(name, code, "approved", Capture(
        incident=provenance.pop("incident", "ex-001-memory-deriv-ramcount"), source="example",
        summary=provenance.pop("summary", "a stored procedure"), triggers=triggers,
        reviewed_by=("shift coordinator",), **provenance))
    return repo


async def _open(client, settings, requester: str = "alice", **start) -> str:
    session = new_session()
    await inv.start(client, inv.start_input(settings, session, requester, task_id=TASK_ID, startup_hypothesis=False,
                                            **start))
    return session


async def _audit_kinds(services, session: str, until: str) -> list[str]:
    """The session's audit row kinds, once one of kind ``until`` is written (the workflow writes them in batches)."""
    async def probe():
        async with services.store.pool.connection() as conn:
            rows = await (await conn.execute("SELECT kind FROM audit WHERE run_id = %s ORDER BY seq",
                                             (f"investigate:{session}",))).fetchall()
        kinds = [kind for (kind,) in rows]
        return kinds if until in kinds else None
    return await wait_for(probe)


async def test_a_fitting_procedure_is_proposed_without_a_model_call_and_runs_only_after_review(
        ops, client, settings, services, running_worker, brain, llm_server):
    repo = await _store(services, READ_PROC, READ_PROC_CODE, (ASK_JOBS,), incident="ex-004-memory-simul")
    await repo.capture(READ_PROC, READ_PROC_CODE, "approved", Capture(incident="ex-001-memory-deriv-ramcount"))
    session = await _open(client, settings)
    await inv.send_message(client, session, ASK_JOBS, ops.alice)

    view = await pending_turn(client, session, 1)
    assert codegen_calls(llm_server) == 0
    assert view.code == bind(READ_PROC, READ_PROC_CODE, {"task_id": TASK_ID})
    assert view.code.splitlines()[1] == f"task_id = {TASK_ID}" and view.read_only and view.reason == "new_code"
    assert view.reuse is not None and view.reuse.procedure == READ_PROC and view.reuse.frequency == 2
    assert view.reuse.incidents == ["ex-004-memory-simul", "ex-001-memory-deriv-ramcount"]
    assert view.reuse.parameters == {"task_id": TASK_ID} and view.reuse.matched == ASK_JOBS
    assert [p.name for p in view.procedures] == [READ_PROC]
    [said] = [e for e in await entries(client, session, "reuse") if e.turn == 1]
    assert said.text.startswith(f"reusing procedure {READ_PROC}; the store records it captured from ex-004-memory-simul, "
                                "ex-001-memory-deriv-ramcount (2 time(s)), never run here before")
    await asyncio.sleep(1.0)
    assert await entries(client, session, "run") == []  # nothing runs before a person approves it

    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    [run] = await wait_for_runs(client, session, 1)
    assert run.actor == "bob" and run.data["status"] == "ok" and run.data["return_value"]["status"] == "broken"
    assert codegen_calls(llm_server) == 0
    kinds = await _audit_kinds(services, session, "code_run")
    assert kinds.index("procedure_reused") < kinds.index("decision_accepted") < kinds.index("code_run")
    stored = await repo.get(READ_PROC)
    assert stored.provenance.last_run_status == "ok" and stored.provenance.last_run_at is not None

    await inv.send_message(client, session, ASK_JOBS, ops.alice)  # the same turn again: the run is remembered
    view = await pending_turn(client, session, 2)
    assert "last run" in view.reuse.provenance_line() and "(ok)" in view.reuse.provenance_line()


async def test_a_reused_state_changing_procedure_needs_its_requesters_acceptance_and_another_approver(
        ops, client, settings, services, running_worker, brain, llm_server, new_kills):
    await _store(services, KILL_PROC, KILL_PROC_CODE, (ASK_STOP,))
    session = await _open(client, settings)
    await inv.send_message(client, session, ASK_STOP, ops.alice)

    view = await pending_turn(client, session, 1)
    assert codegen_calls(llm_server) == 0 and view.reuse is not None and view.reuse.procedure == KILL_PROC
    assert not view.read_only and view.state_changing == ["kill_task"]
    assert "auto_run" not in [c.value for c in view.choices]
    assert view.requester_accepted is False and any("alice accepts it first" in note for note in notes(view))
    with pytest.raises(inv.InvestigationError) as refused:  # the store proposed it: alice has not taken it yet
        await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    assert refused.value.refusal == "requester_not_accepted"

    accepted = await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.alice)
    said = "alice accepts the stored procedure proposed for their request; it still needs approval by someone else"
    assert accepted.detail == said
    assert [e.text for e in await entries(client, session, "notice") if e.turn == 1] == [said]
    with pytest.raises(inv.InvestigationError) as refused:  # accepting it is not approving it
        await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.alice)
    assert refused.value.refusal == "approver_is_requester"
    now = await inv.pending(client, session)
    assert new_kills() == [] and now is not None and now.requester_accepted is True
    assert any("alice accepted it for their request" in note for note in notes(now))

    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    [run] = await wait_for_runs(client, session, 1)
    assert run.actor == "bob" and [k["endpoint"] for k in new_kills()] and len(new_kills()) == 1
    kinds = await _audit_kinds(services, session, "code_run")
    assert kinds.index("decision_refused") < kinds.index("stored_procedure_accepted") < kinds.index("code_run")


async def test_a_planted_state_changing_procedure_is_not_approved_by_its_planter_alone(
        ops, client, settings, services, running_worker, brain, llm_server, new_kills):
    """An approver who can write `procedures` (the app role: every worker, every local user on the embedded
    stack) plants a kill under alice's everyday question, with a made-up history. Reuse proposed it as the turn's
    code without a model call, and bob, not being its requester, approved it alone: the kill reached PanDA. (Had
    he edited her pending code into the kill, he could not have: an editor counts as asking.)"""
    meta = {"triggers": [ASK_JOBS], "summary": "job summary for the task", "incidents": ["ex-001-memory-deriv-ramcount"],
            "frequency": 7, "reviewed_by": ["shift coordinator"], "sources": ["session"]}
    async with services.store.pool.connection() as conn:
        await conn.execute("INSERT INTO procedures (signature, code, code_hash, status, meta) "
                           "VALUES (%s, %s, %s, 'approved', %s)",
                           (KILL_PROC, KILL_PROC_CODE, code_hash(KILL_PROC_CODE), json.dumps(meta)))
    session = await _open(client, settings)
    await inv.send_message(client, session, ASK_JOBS, ops.alice)

    view = await pending_turn(client, session, 1)
    assert codegen_calls(llm_server) == 0 and view.reuse is not None and view.reuse.procedure == KILL_PROC
    assert not view.read_only and view.requester == "alice"
    with pytest.raises(inv.InvestigationError) as refused:
        await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    assert refused.value.refusal == "requester_not_accepted" and "ask alice to accept it first" in str(refused.value)
    await asyncio.sleep(1.0)
    assert new_kills() == [] and await entries(client, session, "run") == []
    assert (await inv.pending(client, session)).review == view.review  # still waiting, for alice to take or reject


async def test_a_procedure_that_no_longer_fits_is_not_proposed(
        ops, client, settings, services, running_worker, brain, llm_server):
    gone = "proc__get_site_downtime__get_task_details"
    await _store(services, gone, "t = await tools.get_task_details(task_id=task_id)\n"
                                 "return await tools.get_site_downtime(site=t['site'])", (ASK_JOBS,))
    await _store(services, READ_PROC, READ_PROC_CODE, (ASK_JOBS,), causes=("Site in scheduled downtime",))
    brain.propose(READ_CODE)
    session = await _open(client, settings, cause="Insufficient memory request")
    await inv.send_message(client, session, ASK_JOBS, ops.alice)

    view = await pending_turn(client, session, 1)
    assert view.reuse is None and view.code == READ_CODE and codegen_calls(llm_server) == 1
    [said] = [e for e in await entries(client, session, "reuse") if e.turn == 1]
    reasons = {u["name"]: u["reason"] for u in said.data["unfit"]}
    assert reasons[gone] == "calls get_site_downtime, which the catalogue does not offer now"
    assert reasons[READ_PROC] == "was captured for Site in scheduled downtime, not for Insufficient memory request"


async def _capture_in_a_session(ops, client, settings, brain, code: str, request: str) -> str:
    """A session that asks for new code, approves it (bob) and is finalized: one capture of ``code``."""
    brain.propose(code)
    session = await _open(client, settings)
    await inv.send_message(client, session, request, ops.alice, fresh_code=True)
    view = await pending_turn(client, session, 1)
    assert view.code == code
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    await wait_for(lambda: _replied(client, session))
    await inv.finalize(client, session, "Insufficient memory request", "Increase ramCount and retry", ops.alice)
    result = await inv.handle(client, session).result()
    assert result.procedures == [READ_PROC]
    return session


async def _replied(client, session):
    return [e for e in await entries(client, session, "reply") if e.turn == 1]


async def test_two_captures_with_one_signature_are_one_procedure(
        ops, client, settings, services, running_worker, brain):
    first = await _capture_in_a_session(ops, client, settings, brain, READ_PROC_CODE, "status and the jobs, please")
    repo = ProcedureRepository(services.store.pool)
    await repo.set_grant(signed_grant(ops.bob, READ_PROC, READ_PROC_CODE))
    second = await _capture_in_a_session(ops, client, settings, brain, READ_PROC_REFORMATTED, "jobs and status?")

    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute("SELECT signature FROM procedures WHERE signature LIKE 'proc__%%'")).fetchall()
    assert rows == [(READ_PROC,)]
    stored = await repo.get(READ_PROC)
    assert stored.code == READ_PROC_CODE and stored.code_hash == code_hash(READ_PROC_CODE)  # the reviewed text stays
    record = stored.provenance
    assert record.frequency == 2 and record.incidents == (f"investigate:{first}", f"investigate:{second}")
    assert record.versions == 1 and record.causes == ("Insufficient memory request",)
    assert {"status and the jobs, please", "jobs and status?"} <= set(record.triggers)
    assert grant_matches((await repo.grants()).get(READ_PROC), READ_PROC, await repo.approved_code())


async def test_a_changed_body_under_a_granted_signature_is_shown_as_a_diff_and_loses_its_grant(
        ops, client, settings, services, running_worker, brain, llm_server):
    repo = await _store(services, READ_PROC, READ_PROC_CODE, (ASK_JOBS,))
    await repo.set_grant(signed_grant(ops.bob, READ_PROC, READ_PROC_CODE))

    granted = await _open(client, settings)
    await inv.send_message(client, granted, ASK_JOBS, ops.alice)
    [run] = await wait_for_runs(client, granted, 1)
    assert run.actor == "policy:durable_grant" and run.data["status"] == "ok"  # read-only, granted: no prompt

    await _capture_in_a_session(ops, client, settings, brain, READ_PROC_CHANGED, "the failed jobs, counted")
    stored = await repo.get(READ_PROC)
    assert stored.code == READ_PROC_CHANGED and stored.provenance.versions == 2
    assert stored.provenance.previous_code_hash == code_hash(READ_PROC_CODE)

    calls = codegen_calls(llm_server)
    session = await _open(client, settings)
    await inv.send_message(client, session, ASK_JOBS, ops.carol)
    view = await pending_turn(client, session, 1)
    assert codegen_calls(llm_server) == calls and view.reuse is not None and view.reuse.procedure == READ_PROC
    assert view.code == bind(READ_PROC, READ_PROC_CHANGED, {"task_id": TASK_ID})
    assert view.reason == "durable_grant_code_changed" and "auto_run" in [c.value for c in view.choices]
    [shown] = view.procedures
    assert shown.granted_to == "bob" and shown.changed_since_grant
    assert "-return {'status': t['status'], 'jobs': len(j)}" in shown.diff_from_granted
    assert "+return {'status': t['status'], 'jobs': len(j['failed_job_ids'])}" in shown.diff_from_granted
    assert "+return {'status': t['status'], 'jobs': len(j['failed_job_ids'])}" in view.reuse.diff_from_previous
    assert (await repo.grants())[READ_PROC].code_hash == code_hash(READ_PROC_CODE)  # still the old body's
    await asyncio.sleep(1.0)
    assert await entries(client, session, "run") == []
