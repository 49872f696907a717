"""Analysis reads a task with its failed jobs' records, from both targets, and routes the pilot's error
code and the job's site into clues (the task record alone carries neither), and the dialog's peak memory."""

from __future__ import annotations

from bamboo.extraction.panda.routing import route_task_data
from bamboo.panda.client import PandaClient
from bamboo.panda.simulator.contract_seed import FAILED_TASK, RUNNING_TASK
from bamboo.panda.task_records import task_for_analysis
from tests.contract.conftest import Target


async def test_a_failed_task_is_read_with_its_failed_jobs_and_their_codes_become_clues(target: Target) -> None:
    async with PandaClient(target.api_url, target.base_url) as client:
        task, note = await task_for_analysis(client, FAILED_TASK)
        running, running_note = await task_for_analysis(client, RUNNING_TASK)
    assert note == "" and running_note == ""
    jobs = task["failedJobs"]
    assert sorted(j["PandaID"] for j in jobs) == [9000002, 9000003]
    assert {j["pilotErrorCode"] for j in jobs} == {1305} and {j["computingSite"] for j in jobs} == {"ANALY_TEST"}
    assert all(len(j) <= 10 for j in jobs), "a job record is cut to the fields analysis uses"
    names = {f.name for f in route_task_data(task, b"k").features}
    assert {"pilotErrorCode=1305", "computingSite=ANALY_TEST"} <= names
    assert "maxPSS=4000-6000MB" in names, "the peak memory the error dialog reports (issue 30)"
    assert running["failedJobs"] == []
