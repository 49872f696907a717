"""Choose the embedder the settings describe: a configured endpoint, else the bundled MiniLM."""

from __future__ import annotations

import httpx

from bamboo.embeddings.base import Embedder, EmbeddingConfigError
from bamboo.embeddings.local import MINILM_DIM, LocalMiniLMEmbedder
from bamboo.settings import Settings


def build_embedder(settings: Settings, *, http_client: httpx.AsyncClient | None = None) -> Embedder:
    if settings.embedding_base_url:
        from bamboo.embeddings.remote import OpenAIEmbedder  # the model SDK, only where an endpoint is configured

        return OpenAIEmbedder(
            base_url=settings.embedding_base_url,
            model=settings.embedding_model,
            dim=settings.embedding_dim,
            api_key=settings.embedding_api_key.get_secret_value(),
            http_client=http_client,
        )
    if "minilm" not in settings.embedding_model.lower():
        raise EmbeddingConfigError(
            f"BAMBOO_EMBEDDING_MODEL={settings.embedding_model!r} needs BAMBOO_EMBEDDING_BASE_URL: the offline "
            "default only provides all-MiniLM-L6-v2. Set the endpoint, or unset BAMBOO_EMBEDDING_MODEL."
        )
    if settings.embedding_dim != MINILM_DIM:
        raise EmbeddingConfigError(
            f"BAMBOO_EMBEDDING_DIM is {settings.embedding_dim}, but the offline MiniLM model produces "
            f"{MINILM_DIM}-dimensional vectors. Set BAMBOO_EMBEDDING_DIM={MINILM_DIM} or configure "
            "BAMBOO_EMBEDDING_BASE_URL for a model of that size."
        )
    return LocalMiniLMEmbedder()
