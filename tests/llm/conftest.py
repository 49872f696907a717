"""Fixtures for the LLM client tests: the scripted OpenAI-compatible server and a client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bamboo.llm.client import LLMClient
from tests.support.scripted_llm import ScriptedLLMServer, scripted_llm  # noqa: F401  (fixture)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "local_model: runs the real offline model server (a few seconds); part of the normal suite"
    )


@pytest.fixture
async def client(scripted_llm: ScriptedLLMServer) -> AsyncIterator[LLMClient]:  # noqa: F811
    async with LLMClient(base_url=scripted_llm.base_url, model="scripted-model", timeout_s=10.0) as llm:
        yield llm
