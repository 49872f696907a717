"""Audit and blob seams: the interfaces the store implements, so producers need not know the store.

The sandbox bridge, the trust policy and the workflows append audit events and park large payloads
through these protocols; `bamboo.store` provides the Postgres implementation and tests may use the
in-memory ones below.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from pydantic import BaseModel, Field


class AuditEvent(BaseModel):
    kind: str
    actor: str = "system"
    run_id: str | None = None
    body: dict[str, Any] = Field(default_factory=dict)


class AuditSink(Protocol):
    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None: ...


class BlobSink(Protocol):
    async def put(self, data: bytes) -> str:
        """Store bytes, return their SHA-256 hex digest (the reference)."""
        ...

    async def get(self, sha256: str) -> bytes: ...


class MemoryAuditSink:
    """Keeps events in a list; for tests and for tools run outside a worker."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        self.events.append(event)
        return None


class MemoryBlobSink:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    async def get(self, sha256: str) -> bytes:
        return self.blobs[sha256]
