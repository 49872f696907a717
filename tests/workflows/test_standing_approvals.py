"""Standing approvals inside one session (policy/grants.py, workflows/investigation.py) end when they should: a
revoke accepted while a turn is being prepared stops that turn, and a session auto-run lapses with its approver's
right to approve, as a durable grant does. The real workflow, its activities faked (tests/workflows harness)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from bamboo.contract import implements
from bamboo.investigation import contract
from bamboo.investigation.contract import (
    CodegenInput, CodegenResult, GrantInput, Message, PendingView, PolicyContext, PolicyContextInput,
    RevokeGrantsInput, RevokeRequest,
)
from policy.approvers import DeploymentPolicy
from policy.catalog import ToolCatalog, ToolFacts
from policy.decisions import DecisionKind, OperatorDecision
from tests.workflows.conftest import workers
from tests.workflows.test_investigation import CATALOG, POLICY, READ_CODE, FakeSession, Session, open_session
from workflows.investigation import Investigation

PROC = "proc__get_task_details__get_task_jobs_summary"
PROC_BODY = ("t = await tools.get_task_details(task_id=task_id)\n"
             "j = await tools.get_task_jobs_summary(task_id=task_id)\nreturn {'status': t['status'], 'jobs': len(j)}")
CALLS = f"r = await tools.{PROC}(task_id=task_id)\nreturn r"
CALLS_AGAIN = f"r = await tools.{PROC}(task_id=task_id)\nreturn {{'again': r}}"


class SlowModel(FakeSession):
    """Code generation waits for the test when ``gate`` is set (the model takes its time); the registry the worker
    folds is ``policy``, which a test may change (an administrator revoking a key)."""

    def __init__(self, *codes: str) -> None:
        super().__init__(*codes)
        self.gate: asyncio.Event | None = None
        self.in_codegen = asyncio.Event()
        self.policy = POLICY

    @implements(contract.codegen)
    async def codegen(self, inp: CodegenInput) -> CodegenResult:
        if self.gate is not None:
            self.in_codegen.set()
            await self.gate.wait()
        return await FakeSession.codegen(self, inp)

    @implements(contract.policy_context)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        return PolicyContext(session_run=self.session_ids.setdefault(inp.session_id, inp.run), catalog=CATALOG,
                             policy=self.policy)


class GrantStore(SlowModel):
    """The store's durable grants as the worker hands them on (every stored grant counts here; the signature checks
    are the real activity's), and a revoke that clears them, as ProcedureRepository does."""

    def __init__(self, *codes: str) -> None:
        super().__init__(*codes)
        self.stored: dict = {}

    @implements(contract.policy_context)
    async def policy_context(self, inp: PolicyContextInput) -> PolicyContext:
        tools = [ToolFacts(name="get_task_details", read_only=True),
                 ToolFacts(name="get_task_jobs_summary", read_only=True), ToolFacts(name="kill_task"),
                 ToolFacts(name=PROC, origin="procedure", read_only=True)]
        return PolicyContext(session_run=self.session_ids.setdefault(inp.session_id, inp.run),
                             catalog=ToolCatalog.build(tools, {PROC: PROC_BODY}), policy=self.policy,
                             grants=dict(self.stored))

    @implements(contract.grant)
    async def grant(self, inp: GrantInput) -> list[str]:
        for g in inp.grants:
            self.stored[g.procedure] = g
        return [g.procedure for g in inp.grants]

    @implements(contract.revoke_grants)
    async def revoke_grants(self, inp: RevokeGrantsInput) -> list[str]:
        gone = [n for n in [*[g.procedure for g in inp.grants], *inp.whole] if self.stored.pop(n, None) is not None]
        return sorted(set(gone) | set(inp.whole))


async def _auto_run_chosen(temporal: Client, queue: str) -> tuple[Session, PendingView]:
    """A session where alice asked, bob chose auto-run for the code, and it ran."""
    s = await open_session(temporal, queue)
    await s.ask("alice", "status?")
    review = await s.pending(turn=1)
    await s.decide("bob", review, DecisionKind.AUTO_RUN)
    await s.entries("run", 1)
    return s, review


async def _revoke_while_the_model_writes(fake: SlowModel, s: Session, target: str) -> None:
    """Alice asks again; while turn 2's code is being written, bob revokes ``target`` (acknowledged as queued)."""
    fake.gate = asyncio.Event()
    await s.ask("alice", "status again?")
    await asyncio.wait_for(fake.in_codegen.wait(), 30)
    await s.send(Message.REVOKE, RevokeRequest(target=target, actor="bob"), "bob")
    await asyncio.sleep(1.0)  # admitted and queued before the model answers
    fake.gate.set()


async def test_a_revoke_accepted_while_a_turn_is_prepared_stops_its_session_auto_run(temporal: Client) -> None:
    """The turn was decided on the session auto-run the revoke ended, ran unprompted, and the revoke was applied
    only afterwards (revokes were served only while a review waited)."""
    fake = SlowModel(READ_CODE, READ_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        s, review = await _auto_run_chosen(temporal, queue)
        await _revoke_while_the_model_writes(fake, s, review.code_hash[:12])
        turn_2 = (await s.entries("policy", 2))[1]
        assert turn_2.data["reason"] == "new_code", turn_2.text  # not "session_auto_run": it is reviewed again
        again = await s.pending(turn=2)
        [revoke] = await s.entries("revoke", 1)
        runs = await s.entries("run", 1)
    assert again.code_hash == review.code_hash and len(runs) == 1 and len(fake.runs) == 1
    assert revoke.seq < turn_2.seq and revoke.text.startswith("revoked by bob: ")


async def test_a_revoke_accepted_while_a_turn_is_prepared_stops_its_durable_grant(temporal: Client) -> None:
    fake = GrantStore(CALLS, CALLS_AGAIN)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        s = await open_session(temporal, queue)
        await s.ask("alice", "status?")
        review = await s.pending(turn=1)
        assert review.grants, review
        await s.send(Message.DECIDE, OperatorDecision(turn=1, code_hash=review.code_hash, kind=DecisionKind.AUTO_RUN,
                                                      approver="bob", review=review.review,
                                                      grants=tuple(review.grants)), "bob")
        await s.entries("run", 1)
        assert PROC in fake.stored
        await _revoke_while_the_model_writes(fake, s, PROC)
        turn_2 = (await s.entries("policy", 2))[1]
        assert turn_2.data["reason"] == "new_code", turn_2.text  # not "durable_grant": it is reviewed again
        await s.pending(turn=2)
        [revoke] = await s.entries("revoke", 1)
    assert PROC not in fake.stored and len(fake.runs) == 1
    assert revoke.seq < turn_2.seq and PROC in revoke.text


async def test_a_session_auto_run_lapses_when_its_approver_is_revoked(temporal: Client) -> None:
    """A durable grant lapses with its approver (grant_is_signed); a session auto-run kept running after the
    administrator revoked its approver's key."""
    fake = SlowModel(READ_CODE, READ_CODE, READ_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        s, review = await _auto_run_chosen(temporal, queue)
        await s.ask("alice", "status again?")
        runs = await s.entries("run", 2)
        assert runs[1].actor == "policy:session_auto_run"  # while bob may approve, it stands
        fake.policy = DeploymentPolicy(rules=POLICY.rules,
                                       approvers=tuple(a for a in POLICY.approvers if a.identity != "bob"))
        await s.ask("alice", "and once more?")
        turn_3 = (await s.entries("policy", 3))[2]
        assert turn_3.data["reason"] == "session_auto_run_approver_gone", turn_3.text
        again = await s.pending(turn=3)
    assert again.code_hash == review.code_hash and "bob" in again.detail and len(fake.runs) == 2
