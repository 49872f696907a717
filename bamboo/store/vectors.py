"""pgvector implementation of the tool-selection `VectorIndex`: (namespace, section)-scoped items
in `vector_items`, cosine top-k through the HNSW index."""

from __future__ import annotations

import json

from psycopg_pool import AsyncConnectionPool

from bamboo.store.knowledge import _vector
from bamboo.tools.vector_index import VectorHit, VectorItem


class PgVectorIndex:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def upsert(self, namespace: str, section: str, items: list[VectorItem]) -> None:
        if not items:
            return
        unique = {i.id: i for i in items}
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO vector_items (namespace, section, id, content, embedding, meta) "
                "SELECT %s, %s, i, c, e, m::jsonb FROM unnest(%b::text[], %b::text[], %b::vector[], %b::text[]) "
                "AS t(i, c, e, m) ON CONFLICT (namespace, section, id) DO UPDATE SET content = EXCLUDED.content, "
                "embedding = EXCLUDED.embedding, meta = EXCLUDED.meta",
                (namespace, section, list(unique), [i.content for i in unique.values()],
                 [_vector(i.embedding) for i in unique.values()],
                 [json.dumps(i.meta, default=str) for i in unique.values()]),
            )

    async def search(self, namespace: str, section: str, embedding: list[float], k: int) -> list[VectorHit]:
        vec = _vector(embedding)
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT id, 1 - (embedding <=> %s::vector) AS score, content, meta FROM vector_items "
                "WHERE namespace = %s AND section = %s ORDER BY embedding <=> %s::vector, id LIMIT %s",
                (vec, namespace, section, vec, k),
            )).fetchall()
        return [VectorHit(id=r[0], score=float(r[1]), content=r[2], meta=r[3]) for r in rows]
