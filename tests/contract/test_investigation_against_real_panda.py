"""An investigation end to end against the real PanDA server: a reviewed, approved kill_task registers exactly
one kill command in the server's database; a refused kill reaches the operator as the server's message.

It drives the session through ``bamboo.investigation.client`` with the signed requests and registered
identities of ``tests/investigation/conftest.py``: alice asks, bob (a distinct approver) approves.
"""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from bamboo.panda.simulator.contract_seed import OTHERS_TASK, RUNNING_TASK
from policy.decisions import DecisionKind
from tests.investigation.conftest import (  # noqa: F401 — keys_dir and ops are fixtures used here
    ScriptedInvestigator, keys_dir, new_session, ops, pending_turn, wait_for_runs,
)

KILL = ("r = await tools.kill_task(task_id=task_id)\n"
        "return {'registered': r['registered'], 'status': r['status'], 'message': r['message']}")


@pytest.fixture
def settings(stack, database_url, llm_server, real_server, keys_dir):
    """The test stack's settings, with PanDA being the real server (the root fixture's services and
    worker take these)."""
    real_server.reseed()
    return stack.settings(database_url, llm_server.base_url, panda_api_url=real_server.api_url,
                          panda_monitor_url=real_server.base_url, require_distinct_approver=True,
                          keys_dir=keys_dir)


@pytest.fixture
def brain(llm_server) -> ScriptedInvestigator:
    scripted = ScriptedInvestigator()
    llm_server.handler = scripted.handler()
    return scripted


async def _approved_run(client, settings, brain, ops, task_id: int):
    session = new_session()
    brain.propose(KILL)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=task_id, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task", ops.alice)
    view = await pending_turn(client, session, 1)
    assert view.state_changing == ["kill_task"]
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    runs = await wait_for_runs(client, session, 1)
    return session, runs[0]


async def test_an_approved_kill_registers_one_command_on_the_real_server(ops, client, settings, running_worker, brain,
                                                                         real_server) -> None:
    server_log = real_server.workdir / "server.out"
    before = server_log.stat().st_size  # the server (and its log) serve the whole session's tests
    session, run = await _approved_run(client, settings, brain, ops, RUNNING_TASK)
    assert run.data["status"] == "ok", run.data
    assert run.data["return_value"]["registered"] is True and run.data["return_value"]["status"] == "running"
    assert real_server.commands(RUNNING_TASK) == [(RUNNING_TASK, "kill")]
    with server_log.open("rb") as fh:
        fh.seek(before)
        log = fh.read().decode("utf-8", "replace")
    assert sum("POST /api/v1/task/kill" in line for line in log.splitlines()) == 1
    await inv.abandon(client, session, ops.alice, "test finished")


async def test_a_refused_kill_shows_the_servers_message(ops, client, settings, running_worker, brain,
                                                        real_server) -> None:
    session, run = await _approved_run(client, settings, brain, ops, OTHERS_TASK)
    assert run.data["status"] != "ok"
    assert "not the task owner or no production role" in str(run.data)
    assert real_server.commands(OTHERS_TASK) == []
    await inv.abandon(client, session, ops.alice, "test finished")
