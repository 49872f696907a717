"""Sentence embeddings for the knowledge store: the bundled offline MiniLM or an OpenAI-compatible endpoint."""

from bamboo.embeddings.base import Embedder, EmbeddingConfigError, EmbeddingDimensionError
from bamboo.embeddings.factory import build_embedder
from bamboo.embeddings.local import MINILM_DIM, MINILM_MODEL_ID, LocalMiniLMEmbedder
from bamboo.embeddings.remote import OpenAIEmbedder

__all__ = [
    "MINILM_DIM",
    "MINILM_MODEL_ID",
    "Embedder",
    "EmbeddingConfigError",
    "EmbeddingDimensionError",
    "LocalMiniLMEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
]
