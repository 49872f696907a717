"""The built-in tools end to end against both targets: read a task, its failed jobs and datasets; a kill
registers exactly one command (counted in the real server's own database, and in the requests it logged);
a refused kill reaches the operator in PanDA's words."""

from __future__ import annotations

from bamboo.panda.client import PandaClient
from bamboo.panda.simulator.contract_seed import FAILED_TASK, OTHERS_TASK, PAYLOAD_DIAG, RUNNING_TASK
from bamboo.panda.toolbox import PandaToolbox
from tests.contract.conftest import Target


def _kill_requests(target: Target) -> int:
    """How many kill requests the server received: its access log (real) or its call record (simulator)."""
    if target.is_real:
        log = (target.extra["server"].workdir / "server.out").read_text()
        return sum(1 for line in log.splitlines() if "POST /api/v1/task/kill" in line)
    return sum(1 for c in target.extra["sim"].state.calls if c.endpoint == "task/kill")


async def test_read_tools_see_the_task_its_failed_jobs_and_datasets(target: Target) -> None:
    async with PandaClient(target.api_url, target.base_url) as client:
        tools = PandaToolbox(client)
        task = await tools.call_tool("get_task_details", {"task_id": FAILED_TASK})
        assert task.ok and task.data["status"] == "failed" and PAYLOAD_DIAG in task.data["errorDialog"]
        summary = await tools.call_tool("get_task_jobs_summary", {"task_id": FAILED_TASK})
        assert summary.data["status_counts"] == {"finished": 1, "failed": 2}
        assert summary.data["top_errors"] == [{"field": "pilotErrorDiag", "diag": PAYLOAD_DIAG, "count": 2}]
        assert sorted(summary.data["failed_job_ids"]) == [9000002, 9000003]
        datasets = await tools.call_tool("get_task_input_datasets", {"task_id": FAILED_TASK})
        assert datasets.data[0]["file_status"] == {"finished": 1, "failed": 2}
        chain = await tools.call_tool("get_retry_chain", {"task_id": FAILED_TASK})
        assert [e["jediTaskID"] for e in chain.data] == [FAILED_TASK]
        missing = await tools.call_tool("get_task_details", {"task_id": 424242})
        assert not missing.ok and "not found in PanDA" in missing.error


async def test_an_approved_kill_registers_exactly_one_command(target: Target) -> None:
    before = _kill_requests(target)
    async with PandaClient(target.api_url, target.base_url) as client:
        result = await PandaToolbox(client).call_tool("kill_task", {"task_id": RUNNING_TASK, "wait_s": 1})
    assert result.ok, result.error
    assert result.data["registered"] and not result.data["applied"] and result.data["status"] == "running"
    assert "still running" in result.data["note"]
    assert target.commands(RUNNING_TASK) == ["kill"]
    assert _kill_requests(target) - before == 1


async def test_a_refused_kill_reaches_the_operator_as_the_servers_message(target: Target) -> None:
    async with PandaClient(target.api_url, target.base_url) as client:
        tools = PandaToolbox(client)
        not_owner = await tools.call_tool("kill_task", {"task_id": OTHERS_TASK})
        wrong_status = await tools.call_tool("kill_task", {"task_id": FAILED_TASK})
    assert not_owner.error == "kill_task: PanDA refused: not the task owner or no production role"
    assert wrong_status.error == ("kill_task: PanDA refused: Command rejected: the kill command is not accepted "
                                  "if the task is in failed status")
    assert target.commands(OTHERS_TASK) == [] and target.commands(FAILED_TASK) == []
