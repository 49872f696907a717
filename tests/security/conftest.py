"""Adversarial tests of the sandbox's edges, each run under bubblewrap and in degraded mode.

``sandbox`` is parametrised over the isolation mode; the degraded runs force ``isolation="degraded"``
(as an operator would with BAMBOO_SANDBOX_ISOLATION=degraded). A test asserts what holds in both
modes, and where the mechanism differs (a pid namespace versus a uid of the run's own) it says which.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import os

import pytest

from tests.sandbox.conftest import HAS_BWRAP, Harness, harness

MODES = ["bwrap", "degraded"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap" and not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    if request.param == "degraded" and os.geteuid() != 0:
        pytest.skip("degraded isolation needs a root worker (a uid per run)")
    return request.param


@pytest.fixture
async def sandbox(mode: str) -> AsyncIterator[Harness]:
    async with harness(mode) as h:
        yield h
