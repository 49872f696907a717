"""The vector search seam tool selection needs, and an in-memory implementation for tests and offline use.

The production implementation lives on pgvector; anything that keeps (namespace, section)-scoped items
and answers cosine-similarity top-k satisfies the protocol.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from pydantic import BaseModel, Field


class VectorItem(BaseModel):
    id: str
    content: str
    embedding: list[float]
    meta: dict[str, Any] = Field(default_factory=dict)


class VectorHit(BaseModel):
    id: str
    score: float = Field(description="cosine similarity, higher is closer")
    content: str
    meta: dict[str, Any] = Field(default_factory=dict)


class VectorIndex(Protocol):
    async def upsert(self, namespace: str, section: str, items: list[VectorItem]) -> None:
        """Insert or replace items by id within (namespace, section)."""
        ...

    async def search(self, namespace: str, section: str, embedding: list[float], k: int) -> list[VectorHit]:
        """The k items of (namespace, section) most similar to ``embedding``, best first."""
        ...


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class MemoryVectorIndex:
    """Exact search over a dict; fine for thousands of items, which is what a tool catalogue is."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], dict[str, VectorItem]] = {}
        self.upserts = 0

    async def upsert(self, namespace: str, section: str, items: list[VectorItem]) -> None:
        bucket = self._items.setdefault((namespace, section), {})
        for item in items:
            bucket[item.id] = item
        self.upserts += len(items)

    async def search(self, namespace: str, section: str, embedding: list[float], k: int) -> list[VectorHit]:
        bucket = self._items.get((namespace, section), {})
        scored = sorted(
            ((cosine(embedding, item.embedding), item) for item in bucket.values()),
            key=lambda s: (-s[0], s[1].id),
        )
        return [VectorHit(id=i.id, score=s, content=i.content, meta=i.meta) for s, i in scored[:k]]

    def count(self, namespace: str, section: str) -> int:
        return len(self._items.get((namespace, section), {}))
