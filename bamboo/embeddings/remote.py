"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp).

Failures are classified like chat failures (`bamboo.llm.errors`), with messages that name the
``BAMBOO_EMBEDDING_*`` settings; the SDK's own retries are off because Temporal retries activities.
Each returned vector is checked against the configured dimension, so a wrong model is caught at
the first call instead of corrupting the index.
"""

from __future__ import annotations

import httpx
import openai

from bamboo.embeddings.base import EmbeddingDimensionError
from bamboo.llm.errors import EMBEDDING_SETTINGS_PREFIX, LLMError, classify


class OpenAIEmbedder:
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int,
        api_key: str = "not-needed",
        timeout_s: float = 60.0,
        batch_size: int = 128,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.dim = dim
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self._openai = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or "not-needed",
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client,
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._embed_batch(texts[start : start + self.batch_size]))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._openai.embeddings.create(model=self.model_id, input=texts, encoding_format="float")
        except LLMError:
            raise
        except Exception as exc:
            raise classify(
                exc, endpoint=self.base_url, model=self.model_id, timeout_s=self.timeout_s,
                settings_prefix=EMBEDDING_SETTINGS_PREFIX,
            ) from exc
        items = sorted(response.data, key=lambda item: item.index)
        if len(items) != len(texts):
            raise EmbeddingDimensionError(
                f"{self.base_url} returned {len(items)} embeddings for {len(texts)} texts (model {self.model_id!r})."
            )
        for item in items:
            if len(item.embedding) != self.dim:
                raise EmbeddingDimensionError(
                    f"Model {self.model_id!r} at {self.base_url} returns {len(item.embedding)}-dimensional vectors, "
                    f"but BAMBOO_EMBEDDING_DIM is {self.dim}. Set BAMBOO_EMBEDDING_DIM={len(item.embedding)} "
                    "(a knowledge store built with another dimension must then be rebuilt)."
                )
        return [list(item.embedding) for item in items]

    async def aclose(self) -> None:
        await self._openai.close()
