"""What the knowledge store needs from an embedding model: vectors of a known, fixed dimension.

The store records `model_id` and `dim` next to the vectors and refuses a mismatch, because vectors
from two models (or two sizes) in one index would make similarity search silently meaningless.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bamboo.llm.errors import FailureKind, LLMError


@runtime_checkable
class Embedder(Protocol):
    dim: int
    model_id: str

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector of length `dim` per text, in input order."""
        ...


class EmbeddingConfigError(LLMError, ValueError):
    """The embedding settings cannot work together; the message names the setting to change.

    An `LLMError` of kind MISCONFIGURED, so `to_application_error` makes it non-retryable: no retry
    fixes a setting.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=FailureKind.MISCONFIGURED)


class EmbeddingDimensionError(EmbeddingConfigError):
    """A model returned vectors of another size than the configured or recorded dimension."""
