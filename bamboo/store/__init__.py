"""The Postgres/pgvector knowledge store: one pool, four faces (graph, blobs, audit, vectors)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from bamboo.stack_state import load_state
from bamboo.settings import Settings
from bamboo.store.audit_checkpoint import (
    CHECKPOINT_FILE, KEY_FILE, CheckpointFile, create_signing_key, public_key_path,
)
from bamboo.store.audit_log import PostgresAuditLog
from bamboo.store.blobs import PostgresBlobStore
from bamboo.store.db import open_pool
from bamboo.store.knowledge import KnowledgeStore
from bamboo.store.outage import NO_WAIT, OutagePolicy


log = logging.getLogger(__name__)


class StoreNotConfigured(RuntimeError):
    pass


@dataclass(frozen=True)
class StoreLocation:
    """Where the store is and how to reach it: the app's URL, the schema owner's (for migrations),
    and where the audit chain's signed checkpoint and its key live."""

    url: str
    owner_url: str | None = None
    checkpoint_file: Path | None = None
    signing_key: Path | None = None


def resolve_store_location(settings: Settings) -> StoreLocation:
    """BAMBOO_DATABASE_URL (and BAMBOO_DATABASE_OWNER_URL, BAMBOO_AUDIT_*) if set, else the embedded
    Postgres that `bamboo dev up` recorded, whose checkpoint lives under the data directory."""
    data_dir = Path(settings.resolved_data_dir())
    if settings.database_url:
        url, owner, checkpoint = settings.database_url, settings.database_owner_url, settings.audit_checkpoint_file
    else:
        state = load_state(data_dir)
        if not state.database_url:
            raise StoreNotConfigured(
                "No knowledge store is configured: run `bamboo dev up` to start the embedded Postgres, "
                "or set BAMBOO_DATABASE_URL=postgresql://... (with the pgvector extension available)."
            )
        url, owner = state.database_url, settings.database_owner_url or state.owner_database_url
        checkpoint = settings.audit_checkpoint_file or data_dir / "keys" / CHECKPOINT_FILE
    key = settings.audit_signing_key or (checkpoint.with_name(KEY_FILE) if checkpoint else None)
    return StoreLocation(url=url, owner_url=owner, checkpoint_file=checkpoint, signing_key=key)


@dataclass
class Store:
    pool: AsyncConnectionPool
    knowledge: KnowledgeStore
    blobs: PostgresBlobStore
    audit: PostgresAuditLog

    async def close(self) -> None:
        await self.audit.flush_checkpoints()
        await self.pool.close()


async def open_store(url: str, embedding_dim: int, embedding_model: str, max_size: int = 10, *,
                     owner_url: str | None = None, outage: OutagePolicy = NO_WAIT,
                     checkpoints: CheckpointFile | None = None) -> Store:
    pool = await open_pool(url, embedding_dim, embedding_model, max_size=max_size, owner_url=owner_url)
    audit = PostgresAuditLog(pool, outage=outage, checkpoints=checkpoints)
    return Store(pool=pool, knowledge=KnowledgeStore(pool, audit=audit, outage=outage),
                 blobs=PostgresBlobStore(pool, outage=outage), audit=audit)


async def open_configured_store(settings: Settings, embedding_dim: int, embedding_model: str, *, max_size: int,
                                for_worker: bool) -> Store:
    """The store as the settings describe it. A worker waits out database outages and signs audit
    checkpoints (creating its key on first use); the CLI fails fast, and signs only if it can read the
    key (the embedded stack's CLI can; a verifier with only the public key cannot)."""
    where = resolve_store_location(settings)
    checkpoints = None
    if where.checkpoint_file is not None and where.signing_key is not None:
        if for_worker:
            create_signing_key(where.signing_key)
        # A checkpoint without a readable key is an error (CheckpointError), not "not configured": removing
        # the key must not be a way to silence verification.
        if (for_worker or where.checkpoint_file.exists() or where.signing_key.exists()
                or public_key_path(where.signing_key).exists()):
            # Whoever appends signs, if it holds the key: rows a CLI command audits (`bamboo tools call`)
            # are covered at once, not only by the worker's next checkpoint.
            sign = for_worker or os.access(where.signing_key, os.R_OK)
            checkpoints = CheckpointFile(where.checkpoint_file, where.signing_key, sign=sign)
    elif for_worker:
        log.warning("audit checkpoints are not configured: rows cut off the end of the audit chain cannot be "
                    "detected; set BAMBOO_AUDIT_CHECKPOINT_FILE (and BAMBOO_AUDIT_SIGNING_KEY)")
    outage = OutagePolicy(wait_s=settings.store_outage_wait_s) if for_worker else NO_WAIT
    return await open_store(where.url, embedding_dim, embedding_model, max_size=max_size, owner_url=where.owner_url,
                            outage=outage, checkpoints=checkpoints)
