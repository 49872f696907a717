"""The live dependencies a worker wires once and hands to its activities (the dependency seam).

Tests build the same container against a scripted LLM endpoint and a temporary Postgres, so the
activity code under test is the production code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable

from bamboo.embeddings.base import Embedder
from bamboo.embeddings.factory import build_embedder
from bamboo.extraction.base import ExtractionStrategy
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.settings import Settings
from bamboo.store import Store, open_configured_store


@dataclass
class Services:
    settings: Settings
    store: Store
    llm: LLMClient
    embedder: Embedder
    strategy: ExtractionStrategy
    # Resources wired later (a sandbox warm pool, tool clients) register how to release them here.
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()
        self.closers.clear()
        await self.store.close()
        await self.llm.aclose()
        close_embedder = getattr(self.embedder, "aclose", None)
        if close_embedder is not None:  # the local ONNX model holds no connection
            await close_embedder()


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
