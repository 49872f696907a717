"""The passage search before issue 25 (commit 9b423c1), kept to measure it beside today's in one run:
the table-wide HNSW index at pgvector's default ef_search (40) unfiltered; filtered, the same index at
ef_search 200 with the section filtered after the scan, and an exact scan of the section when that
left fewer than k rows."""

from __future__ import annotations

from typing import Any

import numpy as np

FILTERED_EF_SEARCH = 200


async def search(pool: Any, embedding: np.ndarray, k: int, section: str | None) -> list[str]:
    """The graph ids of the hits, nearest first."""
    vec = np.asarray(embedding, dtype=np.float32)
    async with pool.connection() as conn:
        if not section:
            rows = await (await conn.execute(
                "SELECT graph_id FROM passages ORDER BY embedding <=> %s LIMIT %s", [vec, k])).fetchall()
        else:
            async with conn.transaction():
                await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)",
                                   [str(min(1000, max(FILTERED_EF_SEARCH, 4 * k)))])
                rows = await (await conn.execute(
                    "SELECT graph_id FROM passages WHERE section = %s ORDER BY embedding <=> %s LIMIT %s",
                    [section, vec, k])).fetchall()
            if len(rows) < k:
                rows = await (await conn.execute(
                    "WITH candidates AS MATERIALIZED (SELECT graph_id, embedding <=> %s AS distance "
                    "FROM passages WHERE section = %s) SELECT graph_id FROM candidates ORDER BY distance LIMIT %s",
                    [vec, section, k])).fetchall()
    return [r[0] for r in rows]
