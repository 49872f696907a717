"""A temporary incidents directory and the simulator serving it over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.toolbox import PandaToolbox

from .incidents import BROKERAGE_TASK, DONE_TASK, MEMORY_TASK, PARENT_TASK, RUNNING_TASK, write_incidents

__all__ = ["BROKERAGE_TASK", "DONE_TASK", "MEMORY_TASK", "PARENT_TASK", "RUNNING_TASK"]


@pytest.fixture(scope="session")
def incidents_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_incidents(tmp_path_factory.mktemp("incidents"))


@pytest.fixture(scope="session")
def simulator(incidents_dir: Path):
    with PandaSimulator(incidents_dir) as sim:
        yield sim


@pytest.fixture
async def client(simulator: PandaSimulator):
    async with PandaClient(simulator.api_url, simulator.monitor_url) as c:
        yield c


@pytest.fixture
async def toolbox(client: PandaClient) -> PandaToolbox:
    return PandaToolbox(client)
