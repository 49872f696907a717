"""Content-addressed blobs: the claim check that keeps large payloads out of workflow histories."""

from __future__ import annotations

import hashlib

from psycopg_pool import AsyncConnectionPool

from bamboo.store.outage import NO_WAIT, OutagePolicy, waits_out_outages


class BlobNotFound(KeyError):
    pass


class PostgresBlobStore:
    def __init__(self, pool: AsyncConnectionPool, *, outage: OutagePolicy = NO_WAIT) -> None:
        self._pool = pool
        self.outage = outage

    @waits_out_outages("park a blob")
    async def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO blobs (sha256, size, bytes) VALUES (%s, %s, %s) ON CONFLICT (sha256) DO NOTHING",
                (digest, len(data), data),
            )
        return digest

    @waits_out_outages("read a blob")
    async def get(self, sha256: str) -> bytes:
        async with self._pool.connection() as conn:
            row = await (await conn.execute("SELECT bytes FROM blobs WHERE sha256 = %s", (sha256,))).fetchone()
        if row is None:
            raise BlobNotFound(f"blob {sha256} is not in the store (was the database reset?)")
        return bytes(row[0])
