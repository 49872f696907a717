"""A resolved incident's written procedure becomes code once, under review (issue 26), on the real stack.

The store holds a cause whose resolved incidents recorded written investigation steps (prose, no code). In a
session on that cause, ``/codify`` lists them without a model call; ``/codify 1`` asks the model to write code
for the first, which is reviewed and approved like any code (the review names the written step and its
incidents); finalize stores the code with that step and those incidents as where it came from. A later session
sees the step as turned into code, is not offered to write it again, and reuses the stored code without a model
call.
"""

from __future__ import annotations

import pytest

from bamboo.frontends.review import said as shown_apart
from bamboo.investigation import client as inv
from bamboo.investigation.contract import Message, OperatorMessage
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph
from policy.decisions import DecisionKind
from tests.investigation.conftest import (
    READ_PROC, READ_PROC_CODE, TASK_ID, entries, new_session, pending_turn, wait_for, wait_for_runs,
)

pytestmark = pytest.mark.usefixtures("terminate_sessions")

CAUSE = "Scout jobs exceeded the memory request"
WRITTEN = "Check the scout jobs' maxPSS against the task's ramCount"
SECOND = "Compare ramCount with the site's memory limit"
CODEGEN = "InvestigationCode"


async def _seed_written(services) -> None:
    """Two resolved incidents recorded the same two written steps for one cause, as extraction stores them."""
    names = [CAUSE, WRITTEN, SECOND]
    vectors = dict(zip(names, await services.embedder.embed(names)))
    for incident in ("inc-scouts-a", "inc-scouts-b"):
        graph = KnowledgeGraph()
        cause = graph.add_node(GraphNode(kind="Cause", name=CAUSE))
        for order, step in enumerate((WRITTEN, SECOND), 1):
            ref = graph.add_node(GraphNode(kind="Procedure", name=step, description=step,
                                           props={"source": "resolution_record"}))
            graph.add_edge(GraphEdge(src=cause, kind="investigated_by", dst=ref, params={"order": order}))
        await services.store.knowledge.write_graph(
            GraphWrite(graph_id=f"graph-{incident}", incident_id=incident, graph=graph), [],
            {("Cause", CAUSE): vectors[CAUSE], ("Procedure", WRITTEN): vectors[WRITTEN],
             ("Procedure", SECOND): vectors[SECOND]})


async def _codify(client, session: str, speaker, wanted: str) -> None:
    message = OperatorMessage(text=f"/codify {wanted}".strip(), author=speaker.identity, codify=wanted)
    await inv.signal(client, session, Message.MESSAGE, message, speaker)


async def _open(client, settings) -> str:
    session = new_session()
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False,
                                            cause=CAUSE))
    return session


def _codegen_calls(llm_server) -> int:
    return llm_server.counts_by_schema().get(CODEGEN, 0)


async def test_a_written_procedure_becomes_code_once_under_review(
        ops, client, settings, services, running_worker, brain, llm_server):
    await _seed_written(services)
    session = await _open(client, settings)

    await _codify(client, session, ops.alice, "")
    [listing] = await wait_for(lambda: entries(client, session, "written"))
    assert [w["name"] for w in listing.data["items"]] == [WRITTEN, SECOND] and listing.data["basis"] == "cause"
    assert listing.data["items"][0]["incidents"] == ["inc-scouts-a", "inc-scouts-b"]
    assert "1. " + WRITTEN in listing.text and _codegen_calls(llm_server) == 0
    assert await inv.pending(client, session) is None  # a listing proposes nothing

    brain.propose(READ_PROC_CODE)
    await _codify(client, session, ops.alice, "1")
    view = await pending_turn(client, session, 2)
    assert _codegen_calls(llm_server) == 1
    [asked] = [c for c in llm_server.calls if c.schema_name == CODEGEN]
    assert WRITTEN in asked.user and "inc-scouts-a" in asked.user  # the model was asked for the written step
    assert view.codifies is not None and view.codifies.name == WRITTEN
    assert view.codifies.incidents == ["inc-scouts-a", "inc-scouts-b"] and view.reuse is None
    # the written step is stored text: shown apart from the verdict under its label, never as what was asked
    assert view.request == "/codify 1"
    apart = shown_apart(view)
    assert "the written step it codes (stored from inc-scouts-a, inc-scouts-b): " in apart.words
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    [run] = await wait_for_runs(client, session, 1)
    assert run.data["status"] == "ok" and run.actor == "bob"

    await inv.finalize(client, session, CAUSE, "Raise ramCount above the scouts' maxPSS", ops.alice)
    result = await inv.handle(client, session).result()
    assert result.procedures == [READ_PROC]
    stored = await ProcedureRepository(services.store.pool).get(READ_PROC)
    assert stored is not None and stored.code == READ_PROC_CODE
    record = stored.provenance
    assert record.codified_from == (WRITTEN,)
    assert set(record.incidents) == {"inc-scouts-a", "inc-scouts-b", f"investigate:{session}"}
    assert record.frequency == 3 and WRITTEN in record.triggers and record.reviewed_by == ("bob",)

    # Written once: a later session sees it as code, is not offered to write it again, and reuses the code.
    later = await _open(client, settings)
    await _codify(client, later, ops.alice, "")
    [listing] = await wait_for(lambda: entries(client, later, "written"))
    assert listing.data["items"][0]["codified_as"] == READ_PROC and f"(code: {READ_PROC})" in listing.text
    await _codify(client, later, ops.alice, "1")

    async def refused():
        return [e for e in await entries(client, later, "notice") if e.turn == 2]
    [said] = await wait_for(refused)
    assert "turned into code already" in said.text and READ_PROC in said.text
    assert await inv.pending(client, later) is None and _codegen_calls(llm_server) == 1

    await inv.send_message(client, later, WRITTEN, ops.alice)
    view = await pending_turn(client, later, 3)
    assert view.reuse is not None and view.reuse.procedure == READ_PROC and _codegen_calls(llm_server) == 1
    assert "inc-scouts-a" in view.reuse.incidents


async def test_codify_names_what_it_cannot_find_and_proposes_nothing(
        ops, client, settings, services, running_worker, brain, llm_server):
    await _seed_written(services)
    session = await _open(client, settings)
    await _codify(client, session, ops.alice, "7")
    [listing] = await wait_for(lambda: entries(client, session, "written"))
    assert listing.text.startswith("No written procedure '7' here; send /codify N with one of: 1. ")
    assert _codegen_calls(llm_server) == 0
    brain.propose(READ_PROC_CODE)
    await _codify(client, session, ops.alice, "check the SCOUT jobs' maxpss against the task's ramcount")
    view = await pending_turn(client, session, 2)  # a name matches whatever its case
    assert view.codifies is not None and view.codifies.name == WRITTEN


async def test_without_a_cause_the_nearest_written_procedures_are_listed(
        ops, client, settings, services, running_worker, brain, llm_server):
    await _seed_written(services)
    session = new_session()
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False,
                                            symptom=SECOND))
    await _codify(client, session, ops.alice, "")
    [listing] = await wait_for(lambda: entries(client, session, "written"))
    assert listing.data["basis"] == "nearest" and listing.data["items"][0]["name"] == SECOND
    assert listing.data["items"][0]["cause"] == CAUSE
