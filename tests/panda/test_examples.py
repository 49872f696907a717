"""The simulator over the project's own incident files, and every read-only tool against each task."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bamboo.models.incident import Incident
from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.world import REFERENCE_OFFSET, build_world
from bamboo.panda.toolbox import PandaToolbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
pytestmark = pytest.mark.skipif(not any(EXAMPLES.glob("*.json")), reason="no example incidents in this checkout")


def incidents() -> list[Incident]:
    return [Incident.model_validate_json(p.read_text()) for p in sorted(EXAMPLES.glob("*.json"))]


def test_every_example_loads_and_jobs_quote_the_error_dialog() -> None:
    world = build_world(EXAMPLES)
    assert world.skipped_files == {}
    all_ids = [j["PandaID"] for jobs in world.jobs.values() for j in jobs]
    assert len(all_ids) == len(set(all_ids)), "PandaIDs must be unique across the world"
    for incident in incidents():
        task = incident.task_data
        dialog = task.get("errorDialog") or ""
        jobs = world.jobs[task["jediTaskID"]]
        failed = [j for j in jobs if j["jobStatus"] == "failed"]
        pilot = re.search(r"pilot:(\d+)", dialog)
        if pilot:
            assert failed and all(j["pilotErrorCode"] == int(pilot.group(1)) for j in failed), incident.incident_id
        named = re.search(r"pandaid=(\d+)", dialog)
        if named:
            assert int(named.group(1)) in {j["PandaID"] for j in failed}, incident.incident_id
        if "ran out of memory" in dialog.lower():
            assert all(j["maxPSS"] > task["ramCount"] * 1024 for j in failed), incident.incident_id
        assert task["jediTaskID"] + REFERENCE_OFFSET in world.tasks


async def test_read_only_tools_answer_for_every_example() -> None:
    with PandaSimulator(EXAMPLES) as sim:
        async with PandaClient(sim.api_url, sim.monitor_url) as client:
            toolbox = PandaToolbox(client)
            read_only = [s for s in toolbox.list_tools() if s.read_only]
            for incident in incidents():
                tid = incident.task_data["jediTaskID"]
                for spec in read_only:
                    args: dict = {"task_id": tid}
                    if spec.name == "compare_failed_vs_successful_job_logs":
                        args["reference_task_id"] = tid + REFERENCE_OFFSET
                    if spec.name == "summarize_job_log":
                        jobs = (await toolbox.call_tool("get_scout_job_details", {"task_id": tid})).data or []
                        if not jobs:
                            continue
                        args["panda_id"] = jobs[0]["PandaID"]
                    result = await toolbox.call_tool(spec.name, args)
                    assert result.ok, f"{spec.name} on {incident.incident_id}: {result.error}"
