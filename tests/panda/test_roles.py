"""The simulator is PanDA for a plain user: roles by the caller's identity, as the real server grants them.

The expected envelopes are the real server's (1.0.4), as captured from it for the test identity, a plain
user: killing another user's task and pausing any task are refused, with these exact messages. Issue 27:
``bamboo panda-sim`` gave every caller the production role, so both succeeded; ``getJediTaskDetails(full=True)``
failed for every task served from incident files, which have no stored task parameters.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.contract_seed import TEST_USER

from .incidents import MEMORY_TASK, RUNNING_TASK, write_incidents

# The real server's answers to the test identity (captured, see the module docstring).
NOT_OWNER = {"success": False, "message": "not the task owner or no production role", "data": None}
NO_PRODUCTION_ROLE = {"success": False, "message": "production or pilot role required", "data": None}
OWNER_DN = "/DC=ch/DC=cern/OU=Users/CN=user-a"  # who owns MEMORY_TASK and RUNNING_TASK in the test incidents


def registered(task_id: int, command: str = "kill") -> dict:
    return {"success": True, "data": 0,
            "message": f"command={command} is registered for task ID {task_id}. will be executed in a few minutes"}


def post(sim: PandaSimulator, path: str, body: dict, **headers: str) -> dict:
    return httpx.post(f"{sim.api_url}/{path}", json=body, headers={"Accept": "application/json", **headers},
                      timeout=10).json()


def get(sim: PandaSimulator, path: str, headers: dict | None = None, **params) -> dict:
    return httpx.get(f"{sim.api_url}/{path}", params=params, headers={"Accept": "application/json", **(headers or {})},
                     timeout=10).json()


@pytest.fixture
def plain(incidents_dir: Path) -> Iterator[PandaSimulator]:
    with PandaSimulator(incidents_dir, production_role=False, jedi_delay_s=3600) as sim:
        yield sim


def test_a_plain_user_may_not_kill_retry_or_pause_another_users_task(plain: PandaSimulator) -> None:
    assert not plain.production_role
    assert post(plain, "task/kill", {"task_id": RUNNING_TASK}) == NOT_OWNER
    assert post(plain, "task/retry", {"task_id": MEMORY_TASK}) == NOT_OWNER
    assert post(plain, "task/pause", {"task_id": RUNNING_TASK}) == NO_PRODUCTION_ROLE
    assert post(plain, "task/resume", {"task_id": RUNNING_TASK}) == NO_PRODUCTION_ROLE
    assert plain.state.jedi.table() == []
    assert [(c.endpoint, c.accepted) for c in plain.state.calls] == [("task/kill", False), ("task/retry", False)]


def test_the_owner_may_act_on_its_own_tasks_but_not_pause_them(plain: PandaSimulator) -> None:
    owner = {"X-Test-DN": OWNER_DN}
    assert post(plain, "task/kill", {"task_id": RUNNING_TASK}, **owner) == registered(RUNNING_TASK)
    assert post(plain, "task/retry", {"task_id": MEMORY_TASK}, **owner) == registered(MEMORY_TASK, "retry")
    assert post(plain, "task/pause", {"task_id": RUNNING_TASK}, **owner) == NO_PRODUCTION_ROLE


def test_the_production_role_belongs_to_the_identity_not_to_every_caller(incidents_dir: Path) -> None:
    with PandaSimulator(incidents_dir, production_role=True, jedi_delay_s=3600) as sim:
        assert sim.production_role
        assert post(sim, "task/kill", {"task_id": RUNNING_TASK}) == registered(RUNNING_TASK)
        assert post(sim, "task/pause", {"task_id": RUNNING_TASK}) == registered(RUNNING_TASK, "pause")
        someone = {"X-Test-DN": "/DC=ch/DC=cern/OU=Users/CN=someone else"}
        assert post(sim, "task/kill", {"task_id": RUNNING_TASK}, **someone) == NOT_OWNER
        assert post(sim, "task/pause", {"task_id": RUNNING_TASK}, **someone) == NO_PRODUCTION_ROLE


def test_full_task_details_for_every_task_served(plain: PandaSimulator) -> None:
    """getJediTaskDetails(full=True): include_parameters reads the task's parameters, which every task has."""
    served = sorted(plain.world.tasks)
    assert len(served) >= 6  # incident tasks, their reference and parent tasks, the fixture's extra task
    for task_id in served:
        body = get(plain, "task/get_details", task_id=task_id, include_parameters=True, include_status=True)
        assert body["success"], (task_id, body)
        assert body["data"]["status"] == plain.world.tasks[task_id]["status"]
        assert set(body["data"]) == {"inDS", "outDS", "statistics", "PandaID", "mergeStatus", "mergePandaID",
                                     "status", "cliParams"}
        raw = get(plain, "task/get_detailed_info", task_id=task_id)["data"]["raw_task_params"]
        assert raw["taskName"] == plain.world.tasks[task_id]["taskName"]


def test_listing_since_shows_only_the_callers_own_tasks(plain: PandaSimulator) -> None:
    since = "2026-10-01 00:00:00"
    assert get(plain, "task/get_tasks_detailed_info_since", since=since) == {"success": True, "message": "",
                                                                              "data": []}
    owned = get(plain, "task/get_tasks_detailed_info_since", {"X-Test-DN": OWNER_DN}, since=since)["data"]
    assert owned and {t["userName"] for t in owned} == {"user-a"}
    named = get(plain, "task/get_tasks_detailed_info_since", since=since, filters='{"userName": "user-a"}')["data"]
    assert sorted(t["jediTaskID"] for t in named) == sorted(t["jediTaskID"] for t in owned)


def test_bamboo_panda_sim_serves_a_plain_user_by_default(tmp_path: Path) -> None:
    write_incidents(tmp_path)
    launcher = ("import typer; from bamboo.cli.tools_cmd import panda_sim; "
                "app = typer.Typer(); app.command()(panda_sim); app()")
    process = subprocess.Popen([sys.executable, "-c", launcher, "--port", "0", "--incidents", str(tmp_path),
                                "--jedi-delay", "3600"], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.startswith("API"):
                break
        api_url = lines[-1].split()[1]
        assert any(line.startswith(f"caller   {TEST_USER}, a plain user") for line in lines), lines
        headers = {"Accept": "application/json"}
        kill = httpx.post(f"{api_url}/task/kill", json={"task_id": RUNNING_TASK}, headers=headers, timeout=10)
        assert kill.json() == NOT_OWNER
        pause = httpx.post(f"{api_url}/task/pause", json={"task_id": RUNNING_TASK}, headers=headers, timeout=10)
        assert pause.json() == NO_PRODUCTION_ROLE
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
