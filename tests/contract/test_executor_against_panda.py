"""Remote executors against PanDA itself: real ``curl`` on the ``ro`` and ``rw`` channels, run by an executor
worker on its Temporal queue, against the real PanDA server where its recipe is present (and the simulator,
which must agree with it). A production kill runs only with all seven gates, and is counted by the server:
the command JEDI will act on, in the server's own command table."""

from __future__ import annotations

import json

import pytest

from bamboo.panda.simulator.contract_seed import FAILED_TASK, RUNNING_TASK
from tests.contract.conftest import Target
from tests.executors.conftest import kill_target, open_harness, repos  # noqa: F401 — ``repos`` is a fixture
from tests.executors.test_write_gates import assert_gate


@pytest.fixture
async def panda_harness(stack, database_url, target: Target, repos, tmp_path):  # noqa: F811
    async with open_harness(stack, database_url, target.api_url, repos, tmp_path) as h:
        yield h


async def test_a_read_on_staging_ro_gets_the_task_from_the_server(panda_harness, target: Target):
    h = panda_harness
    argv = h.status_argv(FAILED_TASK)
    async with h.executor(h.config("staging", "ro")):
        result = await h.call("staging", "ro", "panda_curl", argv, h.sign(h.claims("staging", "ro", argv)))
    assert result.outcome.exit_code == 0, result.outcome.stderr
    # Without "Accept: application/json" the server answers with the envelope's Python repr, as the real one does.
    assert result.outcome.stdout == "{'success': True, 'message': '', 'data': 'failed'}", result.outcome.stdout
    assert result.access == "read" and result.targets == [f"panda:task:{FAILED_TASK}"]
    assert target.commands(FAILED_TASK) == []


async def test_a_production_kill_runs_once_with_all_seven_gates_and_never_without_approval(panda_harness,
                                                                                         target: Target):
    h = panda_harness
    argv = h.kill_argv(RUNNING_TASK)
    await h.grant([kill_target(RUNNING_TASK)])
    unapproved = h.sign(h.claims("prod", "rw", argv))
    approved = h.sign(h.approved(h.claims("prod", "rw", argv)))
    async with h.executor(h.config("prod", "rw")):
        refused = await h.refusal("prod", "rw", "panda_curl", argv, unapproved)
        assert_gate(refused, 6, "approval")
        assert target.commands(RUNNING_TASK) == []

        result = await h.call("prod", "rw", "panda_curl", argv, approved)
        assert result.outcome.exit_code == 0, result.outcome.stderr
        answer = json.loads(result.outcome.stdout)  # curl --json asks for JSON
        assert answer["success"] is True and answer["data"] == 0, answer  # 0: the command is registered
        assert target.commands(RUNNING_TASK) == ["kill"]

        replayed = await h.refusal("prod", "rw", "panda_curl", argv, approved)
        assert replayed.type == "envelope.replayed"
    assert target.commands(RUNNING_TASK) == ["kill"]
    assert [kind for kind, _ in await h.audit_kinds()].count("executor_ran") == 1
