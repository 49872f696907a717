"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp).

Failures are classified like chat failures (`bamboo.llm.errors`), with messages that name the
``BAMBOO_EMBEDDING_*`` settings; the SDK's own retries are off because Temporal retries activities.
Each returned vector is checked against the configured dimension, so a wrong model is caught at
the first call instead of corrupting the index.
"""

from __future__ import annotations

import base64

import httpx
import numpy as np
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
            # base64 parses an order of magnitude faster than JSON floats; a server that ignores it still
            # answers with floats, which _vector() accepts too.
            response = await self._openai.embeddings.create(model=self.model_id, input=texts, encoding_format="base64")
        except LLMError:
            raise
        except Exception as exc:
            raise classify(
                exc, endpoint=self.base_url, model=self.model_id, timeout_s=self.timeout_s,
                settings_prefix=EMBEDDING_SETTINGS_PREFIX,
            ) from exc
        items = sorted(response.data, key=lambda item: item.index)
        vectors = [_vector(item.embedding) for item in items]
        if len(items) != len(texts):
            raise EmbeddingDimensionError(
                f"{self.base_url} returned {len(items)} embeddings for {len(texts)} texts (model {self.model_id!r})."
            )
        for vector in vectors:
            if len(vector) != self.dim:
                raise EmbeddingDimensionError(
                    f"Model {self.model_id!r} at {self.base_url} returns {len(vector)}-dimensional vectors, "
                    f"but BAMBOO_EMBEDDING_DIM is {self.dim}. Set BAMBOO_EMBEDDING_DIM={len(vector)} "
                    "(a knowledge store built with another dimension must then be rebuilt)."
                )
        return vectors

    async def aclose(self) -> None:
        await self._openai.close()


def _vector(raw: object) -> list[float]:
    if isinstance(raw, str):
        return np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(float).tolist()
    return [float(x) for x in raw]  # type: ignore[union-attr]
