"""Builds the worker's services once: store, LLM client, embedder, extraction strategy.

The composition root (docs/architecture.md): nothing else in the tree opens a store or an LLM client for
activities, so one configuration reaches every activity the same way.
"""

from __future__ import annotations

from bamboo.embeddings.factory import build_embedder
from bamboo.extraction.base import ExtractionStrategy
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.services import Services
from bamboo.settings import Settings
from bamboo.store import open_configured_store


def build_strategy(settings: Settings, llm: LLMClient) -> ExtractionStrategy:
    if settings.extraction_strategy == "panda":
        return PandaExtractionStrategy(llm, settings.pseudonym_key.get_secret_value().encode())
    from bamboo.extraction.generic import GenericLLMExtractionStrategy

    return GenericLLMExtractionStrategy(llm)


async def build_services(settings: Settings, *, llm_base_url: str | None = None, pool_size: int = 10) -> Services:
    embedder = build_embedder(settings)
    store = await open_configured_store(settings, embedder.dim, embedder.model_id, max_size=pool_size, for_worker=True)
    llm = LLMClient.from_settings(settings, base_url=llm_base_url)
    return Services(settings=settings, store=store, llm=llm, embedder=embedder, strategy=build_strategy(settings, llm))
