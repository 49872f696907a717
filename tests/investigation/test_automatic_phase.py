"""The automatic phase is read-only: kill_task direct, aliased or via a procedure never reaches PanDA."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.investigation import ProcedureSandboxActivities
from worker.wiring import investigation_activities
from bamboo.sandbox.contract import ExecuteCodeInput
from bamboo.investigation import client as inv
from bamboo.investigation.code import with_task_preamble
from bamboo.investigation.procedure_tools import policy_catalog
from bamboo.investigation.procedures import ProcedureRepository
from policy.phases import automatic_allow_set
from tests.investigation.conftest import (
    KILL_CODE, KILL_PROC, KILL_PROC_CODE, READ_CODE, READ_PROC, READ_PROC_CODE, TASK_ID, new_session, wait_for,
)

pytestmark = pytest.mark.usefixtures("terminate_sessions")

ALIASED_KILL = "fn = getattr(tools, 'kill' + '_task')\nreturn await fn(task_id=task_id)"


async def _store_procedures(services) -> ProcedureRepository:
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    await repo.save(KILL_PROC, KILL_PROC_CODE, "approved", {})
    return repo


async def _audit_rows(services, kind: str) -> list[dict]:
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute("SELECT actor, run_id, body FROM audit WHERE kind = %s ORDER BY seq",
                                         (kind,))).fetchall()
    return [{"actor": a, "run_id": r, **b} for a, r, b in rows]


async def test_startup_hypothesis_replays_reads_and_refuses_state_changes(new_kills, client, settings, services, running_worker,
                                                                         brain, sim):
    await _store_procedures(services)
    brain.propose(KILL_CODE, ALIASED_KILL, READ_CODE)
    transcripts = []
    for _ in range(3):  # one after the other, so each session's probe is the next scripted code
        session = new_session()
        await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID))

        async def hypothesis_done(session=session):
            entries = await inv.transcript(client, session)
            return entries if any(e.kind in ("hypothesis", "refused_run") and e.turn == 0 for e in entries) else None

        transcripts.append(await wait_for(hypothesis_done, timeout=120))
    for entries in transcripts:
        suggestions = [e for e in entries if e.kind == "suggestion"]
        assert [s.data["procedure"] for s in suggestions] == [KILL_PROC]
        replays = [e for e in entries if e.kind == "run" and e.turn == 0]
        assert replays[0].data["status"] == "ok" and replays[0].data["return_value"]["status"] == "broken"
    refused = [[e.data["reason"] for e in entries if e.kind == "refused_run"] for entries in transcripts]
    assert refused == [["automatic_state_changing"], ["automatic_opaque"], []]
    assert any(e.kind == "hypothesis" for e in transcripts[2])
    rows = await wait_for(lambda: _at_least(services, "automatic_refused", 5), timeout=30)
    assert sorted(r["reason"] for r in rows) == ["automatic_opaque"] + ["automatic_skip_and_suggest"] * 3 + [
        "automatic_state_changing"]
    assert new_kills() == []


async def _at_least(services, kind, count):
    rows = await _audit_rows(services, kind)
    return rows if len(rows) >= count else None


async def test_bridge_refuses_kill_in_the_automatic_allow_set(new_kills, services, settings, sim):
    """The runtime boundary itself: calls that reach the bridge are refused by resolved name and audited."""
    await _store_procedures(services)
    wiring = investigation_activities(services)
    sandbox: ProcedureSandboxActivities = wiring.sandbox[0].__self__
    try:
        await _run_bridge_probe(services, sandbox, new_kills)
    finally:
        await sandbox.tools.base.close()


async def _run_bridge_probe(services, sandbox: ProcedureSandboxActivities, new_kills) -> None:
    await sandbox.tools.refresh()
    context_tools = sandbox.tools.list_tools()
    allowed = automatic_allow_set(policy_catalog(context_tools, sandbox.tools.procedure_code))
    assert READ_PROC in allowed and "kill_task" not in allowed and KILL_PROC not in allowed
    code = "\n".join([
        "out = {}",
        "try:\n    tools.kill_task\nexcept AttributeError:\n    out['direct_attribute'] = 'absent'",
        "for label, name in [('direct', 'kill_task'), ('aliased', 'kill' + '_task'), ('procedure', %r)]:" % KILL_PROC,
        "    call = getattr(tools, '_bridge' + '_call')",
        "    try:\n        await call(name, {'task_id': task_id})\n        out[label] = 'ran'",
        "    except ToolDenied:\n        out[label] = 'denied'",
        "out['replayed'] = (await tools.%s(task_id=task_id))['status']" % READ_PROC,
        "return out",
    ])
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=10))
    out = await env.run(sandbox.execute_code, ExecuteCodeInput(
        run_id="automatic-bridge-test", code=with_task_preamble(code, TASK_ID), allowed_tools=sorted(allowed),
        actor="automatic", timeout_s=60))
    assert out.status == "ok", out.error
    assert out.return_value == {"direct_attribute": "absent", "direct": "denied", "aliased": "denied",
                                "procedure": "denied", "replayed": "broken"}
    denied = [c.tool for c in out.calls if c.outcome == "denied"]
    assert denied == ["kill_task", "kill_task", KILL_PROC]
    rows = [r for r in await _audit_rows(services, "tool_call") if r["run_id"] == "automatic-bridge-test"]
    assert [(r["tool"], r["outcome"]) for r in rows if r["outcome"] == "denied"] == [
        ("kill_task", "denied"), ("kill_task", "denied"), (KILL_PROC, "denied")]
    assert new_kills() == []
