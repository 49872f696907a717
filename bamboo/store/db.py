"""Connection pool with pgvector types registered on every connection."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool

from bamboo.store.migrate import migrate


async def _configure(conn: psycopg.AsyncConnection) -> None:
    await register_vector_async(conn)
    await conn.set_autocommit(True)


async def open_pool(url: str, embedding_dim: int, embedding_model: str, max_size: int = 10) -> AsyncConnectionPool:
    """Migrate first (the vector type must exist before connections register it), then open the pool."""
    try:
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await migrate(conn, embedding_dim, embedding_model)
    except psycopg.OperationalError as exc:
        raise ConnectionError(
            f"Cannot reach the knowledge store at {_redact(url)}: {exc}. Start the embedded stack with "
            f"`bamboo dev up`, or set BAMBOO_DATABASE_URL to a Postgres with pgvector."
        ) from exc
    pool = AsyncConnectionPool(url, min_size=1, max_size=max_size, configure=_configure, open=False)
    await pool.open(wait=True, timeout=30)
    return pool


def _redact(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url
