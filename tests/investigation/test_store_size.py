"""What the worker hands a session stays within Temporal's payload limit at any size of the procedure store.

The policy context carried every approved procedure's code and the reuse step every procedure's body and the one
before it: past a few hundred procedures of a few KB each, a result exceeded the server's 2 MiB payload limit and
every turn of every session failed. The context now carries the bodies the decision reaches
(``policy.procedures.procedure_scope``) and the reuse step the procedures near enough to be proposed
(``bamboo.investigation.reuse.nearest``). Real store, the worker's own wiring.
"""

from __future__ import annotations

import uuid

from temporalio.contrib.pydantic import pydantic_data_converter

from bamboo.investigation.contract import PolicyContextInput, ReuseQuery
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.investigation.reuse import MAX_REUSE_CANDIDATES
from tests.investigation.conftest import READ_PROC, READ_PROC_CODE
from worker.wiring import investigation_activities

PAYLOAD_LIMIT = 2 * 1024 * 1024
STORED = 600
FILLER = "# " + "step " * 700  # a body of about 3.7 KB, as the procedures operators' sessions leave


def _payload_size(value) -> int:
    return len(pydantic_data_converter.payload_converter.to_payloads([value])[0].data)


def _body(i: int) -> str:
    return f"{FILLER}\nt = await tools.get_task_details(task_id=task_id)\nj = await tools.get_task_jobs_summary(" \
           f"task_id=task_id)\nreturn {{'n': {i}, 'status': t['status'], 'jobs': len(j)}}"


def _activity(wiring, name: str):
    return next(step for step in wiring.store if step.__name__ == name)


async def _fill(services) -> ProcedureRepository:
    repo = ProcedureRepository(services.store.pool)
    for i in range(STORED):
        await repo.save(f"proc__stored_{i:04d}", _body(i), "approved",
                        {"summary": "reads the task's details and its jobs"})
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {"summary": "reads the task's details and its jobs"})
    return repo


async def test_the_policy_context_carries_what_the_decision_reaches(services):
    await _fill(services)
    wiring = investigation_activities(services)
    policy_context = _activity(wiring, "policy_context")
    session = f"size-{uuid.uuid4().hex[:8]}"

    code = f"r = await tools.{READ_PROC}(task_id=1)\ns = await tools.proc__stored_0007(task_id=1)\nreturn r"
    context = await policy_context(PolicyContextInput(session_id=session, run="r1", codes=[code]))
    assert sorted(context.catalog.procedure_code) == [READ_PROC, "proc__stored_0007"]
    assert len(context.stored_procedures) == STORED + 1
    assert _payload_size(context) < PAYLOAD_LIMIT / 20

    named = await policy_context(PolicyContextInput(session_id=session, run="r1", procedures=["proc__stored_0100"]))
    assert list(named.catalog.procedure_code) == ["proc__stored_0100"]
    bare = await policy_context(PolicyContextInput(session_id=session, run="r1"))
    assert dict(bare.catalog.procedure_code) == {}
    # Every exposed procedure is still listed as a tool (the stub's names and the planner's view need them).
    assert {t.name for t in bare.catalog.tools} >= {READ_PROC, "proc__stored_0599"}


async def test_the_reuse_step_hands_on_the_nearest_procedures_only(services, monkeypatch):
    """And compares the request with every stored text off the worker's loop (0.7 s for 600 procedures on it)."""
    from bamboo.investigation import reuse

    offloaded: list[str] = []

    async def recorded(fn, *args, budget_s: float, what: str):
        offloaded.append(what)
        return fn(*args)

    monkeypatch.setattr(reuse, "in_thread", recorded)
    await _fill(services)
    wiring = investigation_activities(services)
    reuse_candidates = _activity(wiring, "reuse_candidates")
    found = await reuse_candidates(ReuseQuery(session_id=f"size-{uuid.uuid4().hex[:8]}",
                                              request="reads the task's details and its jobs"))
    assert len(found.candidates) == MAX_REUSE_CANDIDATES
    assert found.farther == STORED + 1 - MAX_REUSE_CANDIDATES
    assert _payload_size(found) < PAYLOAD_LIMIT / 10
    assert any(what.startswith("comparing the request with") for what in offloaded), offloaded
