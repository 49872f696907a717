"""Finalize writes canonical Cause/Resolution and provenance; abandoned keeps tentative procedures;
idle sessions expire; long sessions continue-as-new with their policies; names are pinned."""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.models.graph import GraphNode, GraphWrite, KnowledgeGraph
from bamboo.investigation.contract import SessionStatus
from policy.code_identity import code_hash
from policy.decisions import DecisionKind
from tests.investigation.conftest import entries, READ_CODE, READ_PROC, READ_PROC_CODE, TASK_ID, new_session, wait_for
from bamboo.contract import activity_name
from bamboo.sandbox import contract as sandbox_contract

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def _approve_next(client, session, turn, ops, kind=DecisionKind.RUN_ONCE):
    async def probe():
        view = await inv.pending(client, session)
        return view if view is not None and view.turn == turn else None
    view = await wait_for(probe)
    await inv.decide_by_review(client, session, view.review, kind, ops.bob)

    async def ran():
        return [e for e in await entries(client, session, "reply") if e.turn == turn]
    await wait_for(ran)


async def test_finalize_canonicalises_and_keeps_provenance(ops, client, settings, services, running_worker, brain):
    [vector] = await services.embedder.embed(["Insufficient memory for the payload"])
    await services.store.knowledge.write_graph(
        GraphWrite(graph_id="seed", incident_id="seed", graph=KnowledgeGraph(nodes=[
            GraphNode(kind="Cause", name="Task ran out of memory")])),
        [], {("Cause", "Task ran out of memory"): vector})
    session = new_session()
    brain.propose(READ_CODE, READ_PROC_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False,
                                            symptom="jobs fail with memory errors"))
    await inv.send_message(client, session, "status?", ops.alice)
    await _approve_next(client, session, 1, ops)
    await inv.send_message(client, session, "FINDING the scouts exceeded ramCount", ops.alice)
    await wait_for(lambda: entries(client, session, "finding"))
    await inv.send_message(client, session, "status and job summary", ops.alice)
    await _approve_next(client, session, 3, ops)
    await inv.finalize(client, session, "Insufficient memory for the payload", "Increase ramCount", ops.alice)
    result = await inv.handle(client, session).result()

    assert result.status is SessionStatus.FINALIZED
    assert result.cause == "Task ran out of memory"
    assert sorted(result.procedures) == ["proc__get_task_details", READ_PROC]
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT s.name, e.kind, d.name, p.params FROM edges e JOIN nodes s ON s.id = e.src "
            "JOIN nodes d ON d.id = e.dst JOIN edge_provenance p ON p.edge_id = e.id WHERE p.graph_id = %s "
            "ORDER BY e.kind, d.name", (f"investigate:{session}",))).fetchall()
        statuses = dict(await (await conn.execute("SELECT signature, status FROM procedures")).fetchall())
    shapes = [(s, k, d) for s, k, d, _ in rows]
    assert ("Task ran out of memory", "solved_by", "Increase ramCount") in shapes
    assert ("jobs fail with memory errors", "indicate", "Task ran out of memory") in shapes
    investigated = {d: p for s, k, d, p in rows if k == "investigated_by"}
    assert set(investigated) == {"proc__get_task_details", READ_PROC}
    provenance = investigated[READ_PROC]
    assert provenance["trigger_signals"] == ["errorDialog mentions memory"]
    assert provenance["result_summary"] == "status ok" and provenance["executed_at"]
    assert provenance["session"] == session
    assert statuses == {"proc__get_task_details": "approved", READ_PROC: "approved"}


async def test_abandoned_session_keeps_procedures_as_tentative(ops, client, settings, services, running_worker, brain):
    session = new_session()
    brain.propose(READ_PROC_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status and job summary", ops.alice)
    await _approve_next(client, session, 1, ops)
    await inv.abandon(client, session, ops.alice, "handed over")
    result = await inv.handle(client, session).result()
    assert result.status is SessionStatus.ABANDONED and result.procedures == [READ_PROC]
    stored = await ProcedureRepository(services.store.pool).get(READ_PROC)
    assert stored is not None and stored.status == "tentative"
    assert READ_PROC not in await ProcedureRepository(services.store.pool).approved_code()
    async with services.store.pool.connection() as conn:
        node = await (await conn.execute("SELECT props FROM nodes WHERE kind = 'Procedure' AND name = %s",
                                         (READ_PROC,))).fetchone()
    assert node is not None and node[0]["status"] == "tentative"


async def test_idle_session_expires_and_withdraws_its_review(ops, client, settings, running_worker, brain):
    session = new_session()
    brain.propose(READ_CODE)
    start = inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False)
    await inv.start(client, start.model_copy(update={"idle_timeout_s": 3}))
    await inv.send_message(client, session, "status?", ops.alice)
    result = await inv.handle(client, session).result()
    assert result.status is SessionStatus.EXPIRED


async def test_long_session_continues_as_new_with_its_policies(ops, client, settings, running_worker, brain):
    session = new_session()
    brain.propose(*[READ_CODE] * 6)
    start = inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False)
    handle = await inv.start(client, start.model_copy(update={"max_history_events": 60}))
    first_run = (await handle.describe()).run_id
    await inv.send_message(client, session, "status?", ops.alice)
    await _approve_next(client, session, 1, ops, DecisionKind.AUTO_RUN)
    for turn in range(2, 6):
        await inv.send_message(client, session, f"status {turn}?", ops.alice)

        async def replied(turn=turn):
            return [e for e in await entries(client, session, "reply") if e.turn == turn]
        await wait_for(replied)
    latest = client.get_workflow_handle(inv.workflow_id(session))
    assert (await latest.describe()).run_id != first_run
    approvals = await inv.approvals(client, session)
    assert list(approvals.session_policies) == [code_hash(READ_CODE)]
    operator_turns = [e.turn for e in await entries(client, session, "operator")]
    assert operator_turns == [1, 2, 3, 4, 5]


def test_names_are_pinned():
    """Compatibility data: a rename orphans running sessions (docs/versioning.md)."""
    from temporalio import workflow as wf

    from bamboo.investigation import contract
    from workflows.investigation import Investigation

    defn = wf._Definition.must_from_class(Investigation)
    assert defn.name == contract.WORKFLOW_NAME == inv.WORKFLOW_NAME == "Investigation"
    assert inv.workflow_id("s1") == "investigate:s1"
    assert set(defn.signals) == set(defn.updates) == set(contract.MESSAGES) == {
        "message", "decide", "revoke", "finalize", "abandon"}
    assert set(defn.queries) >= set(contract.QUERIES) == {"transcript", "pending", "approvals", "status", "spend"}
    assert [activity_name(getattr(contract, n)) for n in (
        "intent", "codegen", "summary", "policy_context", "audit", "grant", "revoke_grants", "finalize")] == [
        "investigation_intent", "investigation_codegen", "investigation_summary", "investigation_policy_context",
        "investigation_audit", "investigation_grant", "investigation_revoke_grants", "investigation_finalize"]
    assert activity_name(sandbox_contract.execute_code) == "execute_code"
