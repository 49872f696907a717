"""Analysis tests share one learned knowledge base per module: populating it is the slow part, and
analysis does not change it (a test proves that), so every test may read the same one."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path

import pytest

from tests.analysis.answers import analysis_handler
from tests.integration.helpers import populate
from tests.support.scripted_llm import ScriptedLLMServer


@pytest.fixture(scope="module")
def analysis_llm():
    """The scripted LLM with accumulation and analysis answers (the diagnosis picks the top candidate)."""
    with ScriptedLLMServer(analysis_handler()) as server:
        yield server


@pytest.fixture
def llm(analysis_llm):
    """The module's scripted LLM, with its default answers restored after a test that changes them."""
    yield analysis_llm
    analysis_llm.handler = analysis_handler()


@pytest.fixture(scope="module")
def corpus():
    """42 generated incidents: 36 to learn, 6 held out (analysed from their task fields only)."""
    from bamboo.samples import generate_incidents

    incidents = generate_incidents(42, seed=11, noise=0.1)
    return incidents[:36], incidents[36:]


@pytest.fixture(scope="module")
def panda(corpus):
    """The PanDA simulator serving the held-out tasks, for the sandboxed read-only tools and `--task-id`."""
    from bamboo.panda.simulator import PandaSimulator
    from bamboo.samples import write_incidents

    with tempfile.TemporaryDirectory(prefix="bamboo-analysis-panda-") as tmp:
        write_incidents(corpus[1], Path(tmp))
        with PandaSimulator(Path(tmp)) as sim:
            yield sim


@pytest.fixture(scope="module")
def analysis_settings(stack, analysis_llm, panda):
    return stack.settings(stack.new_database(), analysis_llm.base_url, panda_api_url=panda.api_url,
                          panda_monitor_url=panda.monitor_url)


@pytest.fixture(scope="module")
async def analysis_services(analysis_settings):
    from worker.services import build_services

    svc = await build_services(analysis_settings, llm_base_url=analysis_settings.llm_base_url, pool_size=4)
    yield svc
    await svc.close()


@pytest.fixture(scope="module")
async def analysis_client(analysis_settings):
    from bamboo.temporal_client import connect

    return await connect(analysis_settings)


@pytest.fixture(scope="module")
async def analysis_worker(analysis_settings, analysis_services):
    from worker.main import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(analysis_settings, services=analysis_services, stop=stop))
    await asyncio.sleep(0.3)
    yield
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 30)


@pytest.fixture(scope="module")
async def learned(corpus, analysis_client, analysis_worker):
    """The 36 training incidents learned through PopulateBatch; returns the 6 held out."""
    from bamboo.samples import write_incidents

    train, held_out = corpus
    with tempfile.TemporaryDirectory(prefix="bamboo-analysis-") as tmp:
        write_incidents(train, Path(tmp) / "train")
        result = await populate(analysis_client, Path(tmp) / "train", concurrency=8)
    assert (result.done, result.failed) == (36, 0), result.failures
    return held_out
