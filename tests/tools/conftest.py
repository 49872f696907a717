from __future__ import annotations

from collections.abc import Iterator

import pytest

from bamboo.panda.simulator import PandaSimulator
from tests.panda.incidents import write_incidents


@pytest.fixture(scope="session")
def tools_simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PandaSimulator]:
    with PandaSimulator(write_incidents(tmp_path_factory.mktemp("incidents"))) as sim:
        yield sim
