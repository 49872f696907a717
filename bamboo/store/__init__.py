"""The Postgres/pgvector knowledge store: one pool, four faces (graph, blobs, audit, vectors)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from bamboo.devstack.state import load_state
from bamboo.settings import Settings
from bamboo.store.audit_log import PostgresAuditLog
from bamboo.store.blobs import PostgresBlobStore
from bamboo.store.db import open_pool
from bamboo.store.knowledge import KnowledgeStore


class StoreNotConfigured(RuntimeError):
    pass


def resolve_database_url(settings: Settings) -> str:
    """BAMBOO_DATABASE_URL if set, else the embedded Postgres that `bamboo dev up` recorded."""
    if settings.database_url:
        return settings.database_url
    state = load_state(Path(settings.resolved_data_dir()))
    if state.database_url:
        return state.database_url
    raise StoreNotConfigured(
        "No knowledge store is configured: run `bamboo dev up` to start the embedded Postgres, "
        "or set BAMBOO_DATABASE_URL=postgresql://... (with the pgvector extension available)."
    )


@dataclass
class Store:
    pool: AsyncConnectionPool
    knowledge: KnowledgeStore
    blobs: PostgresBlobStore
    audit: PostgresAuditLog

    async def close(self) -> None:
        await self.pool.close()


async def open_store(url: str, embedding_dim: int, embedding_model: str, max_size: int = 10) -> Store:
    pool = await open_pool(url, embedding_dim, embedding_model, max_size=max_size)
    return Store(pool=pool, knowledge=KnowledgeStore(pool), blobs=PostgresBlobStore(pool), audit=PostgresAuditLog(pool))
