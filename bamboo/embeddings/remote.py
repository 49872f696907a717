"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp).

Failures are classified like chat failures (`bamboo.llm.errors`), with messages that name the
``BAMBOO_EMBEDDING_*`` settings; the SDK's own retries are off because Temporal retries activities.
Each returned vector is checked against the configured dimension, so a wrong model is caught at
the first call instead of corrupting the index. Each request (a batch of up to ``batch_size`` texts) is
counted in ``bamboo_embedding_requests{source="endpoint"}`` (``bamboo.metrics``).
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

import httpx
import numpy as np

from bamboo.embeddings.base import EmbeddingDimensionError
from bamboo.llm.errors import EMBEDDING_SETTINGS_PREFIX, LLMError, classify
from bamboo.metrics import METRICS

if TYPE_CHECKING:
    import openai


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
        self._api_key = api_key or "not-needed"
        self._http_client = http_client
        self._client: openai.AsyncOpenAI | None = None

    def _openai(self) -> openai.AsyncOpenAI:
        """The SDK client, built at the first call: a process that opens the store only to read it (a CLI
        command) sizes it from the settings and never pays the SDK's second of imports."""
        if self._client is None:
            import openai  # noqa: PLC0415

            from bamboo.llm.client import default_http_client  # noqa: PLC0415 — it imports the SDK too

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                timeout=self.timeout_s,
                max_retries=0,
                http_client=self._http_client or default_http_client(),  # type: ignore[arg-type]  # openai accepts a legacy httpx client at runtime; its stub names httpx2 only
            )
        return self._client

    async def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._embed_batch(texts[start : start + self.batch_size]))
        return vectors

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            # base64 parses an order of magnitude faster than JSON floats; a server that ignores it still
            # answers with floats, which _vector() accepts too.
            # The raw request path of the SDK client: the typed method re-walks every input text to
            # transform it and builds a model per vector, a measurable share of a populate batch's CPU.
            raw = await self._openai().post("/embeddings", cast_to=str,
                                          body={"model": self.model_id, "input": texts, "encoding_format": "base64"})
            response = json.loads(raw)
        except LLMError:
            METRICS.embedding_request("endpoint", "failed")
            raise
        except Exception as exc:
            METRICS.embedding_request("endpoint", "failed")
            raise classify(
                exc, endpoint=self.base_url, model=self.model_id, timeout_s=self.timeout_s,
                settings_prefix=EMBEDDING_SETTINGS_PREFIX,
            ) from exc
        items = sorted(response.get("data") or [], key=lambda item: item.get("index", 0))
        vectors = [_vector(item.get("embedding")) for item in items]
        if len(items) != len(texts):
            raise EmbeddingDimensionError(
                f"{self.base_url} returned {len(items)} embeddings for {len(texts)} texts (model {self.model_id!r})."
            )
        METRICS.embedding_request("endpoint", "ok")
        for vector in vectors:
            if len(vector) != self.dim:
                raise EmbeddingDimensionError(
                    f"Model {self.model_id!r} at {self.base_url} returns {len(vector)}-dimensional vectors, "
                    f"but BAMBOO_EMBEDDING_DIM is {self.dim}. Set BAMBOO_EMBEDDING_DIM={len(vector)} "
                    "(a knowledge store built with another dimension must then be rebuilt)."
                )
        return vectors

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def _vector(raw: object) -> list[float]:
    if isinstance(raw, str):
        return np.frombuffer(base64.b64decode(raw), dtype="<f4").tolist()
    if not isinstance(raw, list):
        raise EmbeddingDimensionError(f"the endpoint answered an embedding that is neither base64 nor a list: {str(raw)[:80]}")
    return [float(x) for x in raw]
