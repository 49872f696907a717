from __future__ import annotations

from pathlib import Path

import httpx

from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.world import build_world

from .incidents import MEMORY_TASK


def test_world_is_deterministic(incidents_dir: Path) -> None:
    first, second = build_world(incidents_dir), build_world(incidents_dir)
    assert first.jobs == second.jobs
    assert first.logs == second.logs


def test_invalid_incident_file_is_skipped_and_reported(simulator: PandaSimulator) -> None:
    health = httpx.get(f"{simulator.base_url}/sim/health").json()
    assert "broken.json" in health["skipped_files"]
    assert health["tasks"] >= 3


def test_failed_jobs_are_consistent_with_the_error_dialog(incidents_dir: Path) -> None:
    world = build_world(incidents_dir)
    failed = [j for j in world.jobs[MEMORY_TASK] if j["jobStatus"] == "failed"]
    finished = [j for j in world.jobs[MEMORY_TASK] if j["jobStatus"] == "finished"]
    assert failed and finished
    assert all(j["pilotErrorCode"] and "memory" in j["pilotErrorDiag"] for j in failed)
    assert all(j["maxPSS"] > j["minRamCount"] * 1024 for j in failed)
    assert all(j["maxPSS"] < j["minRamCount"] * 1024 for j in finished)


def test_extra_fixture_tasks_are_served(simulator: PandaSimulator) -> None:
    body = httpx.get(f"{simulator.api_url}/task/get_detailed_info", params={"task_id": 41000001},
                     headers={"Accept": "application/json"}).json()
    assert body["success"] and body["data"]["status"] == "done"
