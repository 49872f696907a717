from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.services import TestStack, start_stack
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "incidents"


@pytest.fixture(scope="session")
def stack() -> TestStack:
    base = Path(tempfile.mkdtemp(prefix="bamboo-test-"))
    s = start_stack(base)
    yield s
    s.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def llm_server():
    with ScriptedLLMServer(accumulation_handler()) as server:
        yield server


@pytest.fixture
def database_url(stack: TestStack) -> str:
    return stack.new_database()


@pytest.fixture
def settings(stack, database_url, llm_server):
    return stack.settings(database_url, llm_server.base_url)


@pytest.fixture
async def services(settings):
    from worker.services import build_services

    svc = await build_services(settings, llm_base_url=settings.llm_base_url, pool_size=4)
    yield svc
    await svc.close()


@pytest.fixture
async def client(settings):
    from bamboo.temporal_client import connect

    return await connect(settings)


@pytest.fixture
async def running_worker(settings, services):
    """The production worker, in this process, against the test services."""
    from worker.main import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, services=services, stop=stop))
    await asyncio.sleep(0.3)
    yield
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 30)
