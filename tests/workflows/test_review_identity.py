"""An answer approves the review its approver saw, not only the turn and the code hash (policy.decisions.review_digest).

An edit and its undo bring the same code back in the same turn, reviewed again against the stored procedure rows,
which a requester may rewrite meanwhile: the second review of the same hash can be state-changing and pin another
body. An answer given to the first review ran the second."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from bamboo.contract import implements
from bamboo.investigation import client as inv
from bamboo.investigation import contract
from bamboo.investigation.contract import Message, PendingView, PolicyContext, PolicyContextInput, Query
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash
from policy.decisions import DecisionKind, OperatorDecision
from policy.signing import DEFAULT_DEPLOYMENT
from tests.workflows.conftest import until, workers
from tests.workflows.test_investigation import KEYS, POLICY, FakeSession, open_session
from workflows.investigation import Investigation

PROC = "proc__get_task_details__get_task_jobs_summary"
READS = ("t = await tools.get_task_details(task_id=task_id)\n"
         "j = await tools.get_task_jobs_summary(task_id=task_id)\nreturn {'status': t['status'], 'jobs': len(j)}")
KILLS = "t = await tools.get_task_details(task_id=task_id)\nawait tools.kill_task(task_id=task_id)\nreturn t"
CODE = f"r = await tools.{PROC}(task_id=task_id)\nreturn r"
OTHER = f"r = await tools.{PROC}(task_id=task_id)\nreturn {{'r': r}}"
TOOLS = [ToolFacts(name="get_task_details", read_only=True), ToolFacts(name="get_task_jobs_summary", read_only=True),
         ToolFacts(name="kill_task")]


class RewritableProcedures(FakeSession):
    """The procedures table as the store's role (a requester's too on the embedded stack) may write it."""

    body = READS

    @implements(contract.policy_context)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        catalog = ToolCatalog.build([*TOOLS, ToolFacts(name=PROC, origin="procedure")], {PROC: self.body})
        return PolicyContext(session_run=self.session_ids.setdefault(inp.session_id, inp.run), catalog=catalog,
                             policy=POLICY)


async def test_an_answer_to_a_review_does_not_run_the_same_code_reviewed_again_with_another_body(
        temporal: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = RewritableProcedures(CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        monkeypatch.setattr(inv, "SESSION_QUEUE", queue)  # this test's workers are the deployment's here
        session = await open_session(temporal, queue)
        await session.ask("alice", "status please")
        shown = await session.pending(turn=1)
        assert shown.read_only and shown.procedures[0].code == READS

        def waiting():
            return session.handle.query(Query.PENDING.value, result_type=PendingView | None)

        fake.body = KILLS  # the row rewritten, then an edit and its undo: the same code, reviewed again
        await session.send(Message.DECIDE, OperatorDecision(turn=1, code_hash=shown.code_hash, kind=DecisionKind.EDIT,
                                                            approver="alice", replacement_code=OTHER), "alice")
        edited = await until(waiting, lambda v: v is not None and v.code_hash != shown.code_hash)
        await session.send(Message.DECIDE, OperatorDecision(turn=1, code_hash=edited.code_hash, kind=DecisionKind.EDIT,
                                                            approver="alice", replacement_code=CODE), "alice")
        again = await until(waiting,
                            lambda v: v is not None and v.code_hash == shown.code_hash and not v.read_only)
        assert (again.turn, again.code_hash) == (shown.turn, shown.code_hash) and again.review != shown.review

        bob = inv.Speaker("bob", KEYS["bob"], deployment=DEFAULT_DEPLOYMENT)
        sessions = inv.InvestigationClient(temporal)
        try:  # bob answers the page he read, as the console sends it: its turn, hash and review
            await sessions.decide(session.id, bob, shown.turn, shown.code_hash, DecisionKind.RUN_ONCE,
                                  review=shown.review)
        except inv.InvestigationError as refused:
            assert refused.refusal == "review_changed"
        else:
            raise AssertionError("an answer to the read-only review was accepted for the state-changing one")
        await asyncio.sleep(0.5)
        assert fake.runs == []

        await sessions.decide(session.id, bob, again.turn, again.code_hash, DecisionKind.RUN_ONCE, review=again.review)
        await until(lambda: asyncio.sleep(0, fake.runs), bool)
    [run] = fake.runs
    assert run.actor == "bob" and run.procedure_hashes[PROC] == code_hash(KILLS)
    assert set(run.allowed_tools) <= set(run.tool_names.values()) and run.tool_names["kill_task"] == "kill_task"
