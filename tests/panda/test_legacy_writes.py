"""A link in task data never reaches PanDA's legacy write methods, which the real server runs on a GET.

``GET /server/panda/put_file_recovery_request?jediTaskID=N`` registers a recovery of task N for any authenticated
caller (``bamboo.panda.simulator.legacy``). The simulator records such calls now, so the absence of one after the
project's log fetching is evidence; the same GET sent directly is recorded, so the absence is not for want of it.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.world import build_world
from bamboo.panda.toolbox import PandaToolbox

from .incidents import MEMORY_TASK


def legacy_calls(sim: PandaSimulator) -> list[dict]:
    return [c for c in httpx.get(f"{sim.base_url}/sim/calls").json() if c["endpoint"].startswith("legacy/")]


async def test_log_links_to_legacy_writes_are_refused_and_never_sent(incidents_dir: Path) -> None:
    with PandaSimulator(world=build_world(incidents_dir)) as sim:
        write = f"{sim.base_url}/server/panda/put_file_recovery_request?jediTaskID={MEMORY_TASK}"
        sim.world.tasks[MEMORY_TASK]["errorDialog"] = (
            f'lost files, see <a href="{write}">log</a> and <a href="{sim.base_url}/logs/%2e%2e/server/panda/'
            f'put_workflow_request?data=%7B%7D">log2</a> and <a href="{sim.base_url}/jobs/?pandaid=1">jobs</a>')
        async with PandaClient(sim.api_url, sim.monitor_url) as client:
            result = await PandaToolbox(client).call_tool("fetch_linked_log_files", {"task_id": MEMORY_TASK})
        assert result.ok and write in result.data["refused"] and len(result.data["refused"]) == 2
        assert legacy_calls(sim) == []
        httpx.head(write)
        assert [(c["endpoint"], c["task_id"], c["accepted"]) for c in legacy_calls(sim)] == [
            ("legacy/put_file_recovery_request", MEMORY_TASK, True)]
