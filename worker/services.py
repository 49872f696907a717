"""Builds the worker's services once: store, LLM client, embedder, extraction strategy.

The worker's composition root (docs/architecture.md): the store and embedder are opened as every process opens
them (``bamboo.app``); nothing else in the tree opens an LLM client for activities, so one configuration
reaches every activity the same way.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

import httpx
from pydantic import BaseModel

from bamboo.app import Process, open_app
from bamboo.extraction.base import ExtractionStrategy
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.services import Services
from bamboo.settings import Settings

T = TypeVar("T", bound=BaseModel)


class SlottedLLMClient(LLMClient):
    """The worker's model client: at most `BAMBOO_LLM_CONCURRENCY` calls at once, whoever makes them.

    One gate for the whole process, so the setting means one thing: a populate slice running many
    incidents, an escalated incident, an analysis and an investigation all draw from the same slots
    (a slice is one activity on the LLM queue but makes many calls, so the queue's activity slots
    alone never bounded the calls). A call waits for a slot inside its activity, behind the calls ahead of it.
    """

    slots: asyncio.Semaphore

    @classmethod
    def for_worker(cls, settings: Settings, *, base_url: str | None = None,
                   transport: httpx.AsyncBaseTransport | None = None) -> SlottedLLMClient:
        client = cls.from_settings(settings, base_url=base_url, transport=transport)
        assert isinstance(client, cls)
        client.slots = asyncio.Semaphore(settings.llm_concurrency)
        return client

    async def structured(self, *, system: str, user: str, output: type[T], temperature: float = 0.0,
                         name: str | None = None) -> T:
        async with self.slots:
            return await super().structured(system=system, user=user, output=output, temperature=temperature,
                                            name=name)

    async def text(self, *, system: str, user: str, temperature: float = 0.0, max_tokens: int | None = None) -> str:
        async with self.slots:
            return await super().text(system=system, user=user, temperature=temperature, max_tokens=max_tokens)


def build_strategy(settings: Settings, llm: LLMClient) -> ExtractionStrategy:
    if settings.extraction_strategy == "panda":
        return PandaExtractionStrategy(llm, settings.pseudonym_key.get_secret_value().encode())
    from bamboo.extraction.generic import GenericLLMExtractionStrategy

    return GenericLLMExtractionStrategy(llm)


async def build_services(settings: Settings, *, llm_base_url: str | None = None, pool_size: int | None = None) -> Services:
    """The store and embedder as every process opens them (``bamboo.app``), and what only activities need."""
    app = await open_app(settings, Process.WORKER, pool_size=pool_size)
    llm = SlottedLLMClient.for_worker(settings, base_url=llm_base_url)
    return Services(settings=settings, store=app.store, llm=llm, embedder=app.embedder,
                    strategy=build_strategy(settings, llm))
