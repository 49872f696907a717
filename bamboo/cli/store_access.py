"""Open the knowledge store from the CLI with the configured embedder's dimension."""

from __future__ import annotations

from contextlib import asynccontextmanager

from bamboo.embeddings.factory import build_embedder
from bamboo.settings import Settings
from bamboo.store import Store, open_configured_store


@asynccontextmanager
async def opened_store(settings: Settings):
    embedder = build_embedder(settings)
    store: Store = await open_configured_store(settings, embedder.dim, embedder.model_id, max_size=2, for_worker=False)
    try:
        yield store
    finally:
        await store.close()
