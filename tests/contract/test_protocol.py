"""The contract between the project's client and PanDA, checked against the simulator and the real server.

The first five tests are the five ways the client broke against the real server (each fails on the client
as it was before it spoke the real protocol); the rest pin the envelope, encoding and refusal rules the
simulator must share with the server.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
import pytest
from pydantic import SecretStr

from bamboo.panda.client import PandaAuth, PandaClient
from bamboo.panda.errors import PandaAuthError, PandaConfigError, PandaNotFound, PandaRefused
from bamboo.panda.simulator.contract_seed import FAILED_TASK, OTHERS_TASK, RUNNING_TASK
from bamboo.panda.toolbox import PandaToolbox
from tests.contract.conftest import VO, Target, get_json, post_json

MISSING_TASK = 424242


def client_for(target: Target, auth: PandaAuth | None = None) -> PandaClient:
    return PandaClient(target.api_url, target.base_url, auth)


# --- the five differences -----------------------------------------------------------------------------


async def test_1_oidc_sends_the_token_with_its_vo_as_origin(target: Target) -> None:
    auth = PandaAuth(mode="oidc", oidc_token=SecretStr(target.token), vo=VO)
    async with client_for(target, auth) as client:
        assert (await client.get_task(FAILED_TASK))["status"] == "failed"
    without_vo = get_json(target, "task/get_status", task_id=FAILED_TASK,
                          headers={"Authorization": f"Bearer {target.token}"})
    assert without_vo.status_code == 403 and without_vo.text.startswith("ERROR : Token authentication failed")
    with pytest.raises(PandaConfigError, match="BAMBOO_PANDA_AUTH_VO"):
        client_for(target, PandaAuth(mode="oidc", oidc_token=SecretStr(target.token)))
    forged = PandaAuth(mode="oidc", oidc_token=SecretStr(target.token[:-4] + "AAAA"), vo=VO)
    async with client_for(target, forged) as client:
        with pytest.raises(PandaAuthError, match="refused the OIDC token"):
            await client.get_task(FAILED_TASK)


async def test_2_not_found_is_http_200_with_success_false_and_maps_to_not_found(target: Target) -> None:
    raw = get_json(target, "task/get_detailed_info", task_id=MISSING_TASK)
    assert raw.status_code == 200 and raw.json()["success"] is False
    async with client_for(target) as client:
        with pytest.raises(PandaNotFound, match=str(MISSING_TASK)):
            await client.get_task(MISSING_TASK)
        with pytest.raises(PandaNotFound):
            await client.get_task_status(MISSING_TASK)
        assert await client.get_datasets_and_files(RUNNING_TASK) == []  # a task without datasets
        assert await client.get_job_descriptions(RUNNING_TASK) == []


async def test_3_tasks_since_takes_the_servers_format_json_filters_and_n_tasks(target: Target) -> None:
    raw = get_json(target, "task/get_tasks_detailed_info_since", since="2026-11-01T00:00:00")
    assert raw.json() == {"success": False, "message": "Failed to retrieve task IDs", "data": None}
    since = datetime.now() - timedelta(days=7)
    async with client_for(target) as client:
        mine = await client.get_tasks_since(since.isoformat())  # an ISO "T" is turned into the server's form
        assert sorted(t["jediTaskID"] for t in mine) == [FAILED_TASK, RUNNING_TASK]  # only the caller's tasks
        running = await client.get_tasks_since(since, filters={"status": "running"})
        assert [t["jediTaskID"] for t in running] == [RUNNING_TASK]
        others = await client.get_tasks_since(since, filters={"userName": "someone else"})
        assert [t["jediTaskID"] for t in others] == [OTHERS_TASK]
        assert len(await client.get_tasks_since(n_tasks=1)) == 1
        by_id = await client.get_tasks_since(filters={"jediTaskID": FAILED_TASK})  # a number is sent as a string
        assert [t["jediTaskID"] for t in by_id] == [FAILED_TASK]


async def test_4_kill_and_retry_register_a_command_and_refusals_are_errors(target: Target) -> None:
    async with client_for(target) as client:
        receipt = await client.kill_task(RUNNING_TASK)
        assert receipt.registered and receipt.code == 0
        assert receipt.message == f"command=kill is registered for task ID {RUNNING_TASK}. will be executed in a few minutes"
        assert await client.get_task_status(RUNNING_TASK) == "running"  # JEDI acts later
        assert target.commands(RUNNING_TASK) == ["kill"]
        with pytest.raises(PandaRefused, match="not the task owner or no production role"):
            await client.kill_task(OTHERS_TASK)
        with pytest.raises(PandaRefused, match="the kill command is not accepted if the task is in failed status") as info:
            await client.kill_task(FAILED_TASK)
        assert info.value.code == 4
        target.set_status(FAILED_TASK, "done")
        rejected = post_json(target, "task/retry", {"task_id": FAILED_TASK}).json()
        assert rejected["success"] is True and rejected["data"] == 4  # the server's own "success"
        with pytest.raises(PandaRefused, match="retry command is not accepted if the task is in done status"):
            await client.retry_task(FAILED_TASK)
    assert target.commands(OTHERS_TASK) == [] and target.commands(FAILED_TASK) == []


async def test_5_record_shapes_reach_the_tools(target: Target) -> None:
    async with client_for(target) as client:
        toolbox = PandaToolbox(client)
        datasets = await toolbox.call_tool("get_task_input_datasets", {"task_id": FAILED_TASK})
        assert datasets.ok, datasets.error
        assert [(d["name"], d["n_files"], d["file_status"]) for d in datasets.data] == [
            ("data23:data23.test.input", 3, {"finished": 1, "failed": 2})]
        assert set(datasets.data[0]["files"][0]) == {"lfn", "scope", "id", "status"}
        none = await toolbox.call_tool("get_task_input_datasets", {"task_id": RUNNING_TASK})
        assert none.ok and none.no_data
        scouts = await toolbox.call_tool("get_scout_job_details", {"task_id": FAILED_TASK})
        failed = [j for j in scouts.data if j["jobStatus"] == "failed"]
        assert failed and failed[0]["transExitCode"] == "137" and failed[0]["jobDuration"] == 3000.0
        assert all("wallTime" not in j for j in scouts.data)
        task = (await toolbox.call_tool("get_task_details", {"task_id": FAILED_TASK})).data
        assert task["splitRule"] == "reuseSecOnDemand=1,nGBPerJob=1"
        assert (task["nFiles"], task["pctFinished"], task["pctFailed"]) == (3, 33, 67)
        assert task["raw_task_params"]["cliParams"].startswith("prun")
        jobs = await client.get_job_descriptions(FAILED_TASK)
        assert len(jobs[0]) == 129 and isinstance(jobs[0]["creationTime"], str)  # datetimes decoded to ISO


# --- envelope, encoding and refusal rules -------------------------------------------------------------


def test_answers_are_json_only_when_asked_for(target: Target) -> None:
    plain = httpx.get(f"{target.api_url}/task/get_status", params={"task_id": FAILED_TASK})
    assert plain.status_code == 200 and plain.text == "{'success': True, 'message': '', 'data': 'failed'}"
    assert plain.headers["content-type"] == "text/plain"
    assert get_json(target, "task/get_status", task_id=FAILED_TASK).json() == {
        "success": True, "message": "", "data": "failed"}


def test_datetimes_are_marked(target: Target) -> None:
    task = get_json(target, "task/get_detailed_info", task_id=FAILED_TASK).json()["data"]
    assert set(task["creationDate"]) == {"__datetime__"}
    datetime.fromisoformat(task["creationDate"]["__datetime__"])


@pytest.mark.parametrize(("method", "path", "args", "message"), [
    ("GET", "task/get_status", {}, "Argument error: missing a required argument: 'task_id'"),
    ("GET", "task/get_status", {"task_id": 1, "bogus": 1}, "Argument error: got an unexpected keyword argument 'bogus'"),
    ("GET", "task/get_status", {"task_id": "abc"}, "jediTaskID must be an integer"),
    ("GET", "task/get_detailed_info", {"task_id": "abc"},
     "Type error: 'task_id' with value 'abc' could not be casted to type int from str."),
    ("POST", "task/kill", {"task_id": "1003"}, "Type error: 'task_id' must be of type int, got str."),
    ("POST", "task/get_status", {"task_id": 1001}, "expecting GET, received POST"),
    ("GET", "task/kill", {"task_id": 1003}, "expecting POST, received GET"),
    ("POST", "task/pause", {"task_id": 1003}, "production or pilot role required"),
    ("GET", "task/get_datasets_and_files", {"task_id": MISSING_TASK}, "No data found for the task"),
    ("GET", "task/get_parent_detailed_info", {"task_id": FAILED_TASK}, "No parent task found"),
    ("GET", "task/get_task_parameters", {"task_id": FAILED_TASK}, "Task not found"),
])
def test_validation_failures_are_http_200_with_the_servers_message(target: Target, method, path, args, message) -> None:
    response = (get_json(target, path, **args) if method == "GET" else post_json(target, path, args))
    assert response.status_code == 200
    assert response.json() == {"success": False, "message": message, "data": None}


def test_unknown_methods_and_unauthenticated_calls(target: Target) -> None:
    unknown = get_json(target, "task/nonexistent")
    assert (unknown.status_code, unknown.text) == (403, "ERROR : method nonexistent is forbidden")
    anonymous = get_json(target, "task/get_status", task_id=FAILED_TASK, headers={"X-Test-No-Auth": "1"})
    assert anonymous.json()["message"] == "SSL secure connection is required"
    form = httpx.post(f"{target.api_url}/task/kill", data={"task_id": str(RUNNING_TASK)},
                      headers={"Accept": "application/json"})
    assert form.json()["message"] == "Type error: 'task_id' must be of type int, got str."


def test_production_role_may_act_on_others_tasks(target: Target) -> None:
    production = {"X-Test-FQAN": "VOMS /atlas/Role=production"}
    killed = post_json(target, "task/kill", {"task_id": OTHERS_TASK}, headers=production).json()
    assert killed["success"] and killed["data"] == 0
    missing = post_json(target, "task/kill", {"task_id": MISSING_TASK}, headers=production).json()
    assert missing == {"success": False, "message": f"jediTaskID={MISSING_TASK} not found", "data": 2}
    retried = post_json(target, "task/retry", {"task_id": MISSING_TASK}, headers=production).json()
    assert retried == {"success": True, "message": f"jediTaskID={MISSING_TASK} not found", "data": 2}
    assert target.commands(OTHERS_TASK) == ["kill"]


def test_a_second_command_replaces_the_first(target: Target) -> None:
    for _ in range(2):
        assert post_json(target, "task/kill", {"task_id": RUNNING_TASK}).json()["data"] == 0
    assert target.commands(RUNNING_TASK) == ["kill"]
    finish = post_json(target, "task/finish", {"task_id": RUNNING_TASK, "soft": True}).json()
    assert finish["success"] and target.commands(RUNNING_TASK) == ["finish"]


def test_roles_go_by_the_callers_identity(target: Target) -> None:
    """Another plain user: its own task only, no pause, and only its own tasks listed (issue 27: the
    simulator of incident files gave every caller the production role)."""
    other = {"X-Test-DN": "/DC=ch/DC=cern/OU=Users/CN=someone else"}
    not_owner = {"success": False, "message": "not the task owner or no production role", "data": None}
    assert post_json(target, "task/kill", {"task_id": RUNNING_TASK}, headers=other).json() == not_owner
    assert post_json(target, "task/pause", {"task_id": OTHERS_TASK}, headers=other).json() == {
        "success": False, "message": "production or pilot role required", "data": None}
    killed = post_json(target, "task/kill", {"task_id": OTHERS_TASK}, headers=other).json()
    assert killed["success"] and killed["data"] == 0
    since = (datetime.now() - timedelta(days=7)).strftime("%Y-%m-%d %H:%M:%S")
    listed = get_json(target, "task/get_tasks_detailed_info_since", headers=other, since=since).json()["data"]
    assert [t["jediTaskID"] for t in listed] == [OTHERS_TASK]
    assert target.commands(OTHERS_TASK) == ["kill"] and target.commands(RUNNING_TASK) == []
