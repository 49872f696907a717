"""The live dependencies a worker hands to its activities (the dependency seam).

Only the worker builds it (``worker.services.build_services``); activities receive it and build nothing.
Tests build the same container against a scripted LLM endpoint and a temporary Postgres, so the
activity code under test is the production code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Callable

from bamboo.embeddings.base import Embedder
from bamboo.extraction.base import ExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.settings import Settings
from bamboo.store import Store


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
