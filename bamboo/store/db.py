"""Connection pool with pgvector types registered on every connection."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool

from bamboo.store.migrate import migrate

# How long the pool keeps retrying one lost connection before it gives that attempt up (and starts a
# fresh one when a caller next waits). psycopg_pool's attempts back off from 1 s, doubling: with its
# default of 5 minutes a database back after a 60 s outage would wait up to another minute for the
# pool to look again. Short attempts keep the pool looking every few seconds for as long as it lasts.
RECONNECT_TIMEOUT_S = 10.0
# How long a caller waits for a connection before the pool says it has none (PoolTimeout, which the
# worker's store waits out like any outage). psycopg_pool's 30 s kept a caller waiting through a
# whole reconnect cycle after the database was back; a short wait asks again soon.
CONNECTION_WAIT_S = 5.0


async def _configure(conn: psycopg.AsyncConnection) -> None:
    await register_vector_async(conn)
    await conn.set_autocommit(True)


async def open_pool(url: str, embedding_dim: int, embedding_model: str, max_size: int = 10,
                    owner_url: str | None = None) -> AsyncConnectionPool:
    """Migrate first (the vector type must exist before connections register it), then open the pool.

    With `owner_url` the migrations run as the schema's owner and the app's role (the user of `url`)
    is granted what it needs, with the audit table append-only for it (`bamboo.store.roles`)."""
    try:
        app_role = await _role_of(url) if owner_url else None
        async with await psycopg.AsyncConnection.connect(owner_url or url, autocommit=True) as conn:
            row = await (await conn.execute("SELECT current_user")).fetchone()
            assert row is not None  # SELECT current_user always returns a row
            owner_role = row[0]
            await migrate(conn, embedding_dim, embedding_model, app_role if app_role != owner_role else None)
    except psycopg.OperationalError as exc:
        raise ConnectionError(
            f"Cannot reach the knowledge store at {_redact(owner_url or url)}: {exc}. Start the embedded stack with "
            f"`bamboo dev up`, or set BAMBOO_DATABASE_URL to a Postgres with pgvector."
        ) from exc
    pool = AsyncConnectionPool(url, min_size=1, max_size=max_size, configure=_configure, open=False,
                               timeout=CONNECTION_WAIT_S, reconnect_timeout=RECONNECT_TIMEOUT_S)
    await pool.open(wait=True, timeout=30)
    return pool


async def _role_of(url: str) -> str:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        row = await (await conn.execute("SELECT current_user")).fetchone()
        assert row is not None  # SELECT current_user always returns a row
        return str(row[0])


def _redact(url: str) -> str:
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url
