"""The written procedures a session may turn into code: resolved incidents' investigation steps, as prose.

An incident's resolution record lists steps ("check the scout jobs' maxPSS against ramCount"); extraction
stores each as a ``Procedure`` node linked from its cause by ``investigated_by``, with the incident's graph as
the edge's provenance. Those nodes are knowledge, not code. Code procedures (``proc__<tools>``) live on the
same kind of node, so they are told apart by name; a written one that was already turned into code names the
code procedure that records it (``codified_from`` in that procedure's provenance), so it is written once.

When the session has a cause, its written procedures are listed in recorded order; without one, the written
procedures nearest the session's words (symptom, first request) are, by their nodes' embeddings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from bamboo.embeddings.base import Embedder
from bamboo.investigation.contract import WrittenProcedure, WrittenProcedures, WrittenQuery
from policy.procedures import is_procedure_name

MAX_INCIDENTS_SHOWN = 20

# One row per written procedure of the cause: its text, the cause, the incidents whose graphs recorded it.
_OF_CAUSE = """
SELECT pn.name, pn.description, c.name,
       array_remove(array_agg(DISTINCT g.incident_id), NULL),
       coalesce(min((p.params->>'order')::int), 0) AS ord, max(e.frequency) AS freq
FROM nodes c
JOIN edges e ON e.src = c.id AND e.kind = 'investigated_by'
JOIN nodes pn ON pn.id = e.dst AND pn.kind = 'Procedure'
LEFT JOIN edge_provenance p ON p.edge_id = e.id
LEFT JOIN graphs g ON g.graph_id = p.graph_id
WHERE c.kind = 'Cause' AND lower(c.name) = lower(%s)
GROUP BY pn.name, pn.description, c.name
ORDER BY ord, freq DESC, pn.name
LIMIT %s
"""

# The nearest written procedures to a text, each with the cause it was recorded under most often.
_NEAREST = """
WITH near AS (
    SELECT id, name, description, embedding <=> %s AS distance
    FROM nodes WHERE kind = 'Procedure' AND embedding IS NOT NULL AND name NOT LIKE 'proc\\_\\_%%'
    ORDER BY distance LIMIT %s
)
SELECT near.name, near.description,
       (array_agg(c.name ORDER BY e.frequency DESC))[1],
       array_remove(array_agg(DISTINCT g.incident_id), NULL),
       0 AS ord, min(near.distance) AS distance
FROM near
JOIN edges e ON e.dst = near.id AND e.kind = 'investigated_by'
JOIN nodes c ON c.id = e.src AND c.kind = 'Cause'
LEFT JOIN edge_provenance p ON p.edge_id = e.id
LEFT JOIN graphs g ON g.graph_id = p.graph_id
GROUP BY near.name, near.description
ORDER BY distance, near.name
"""


class WrittenProcedureReader:
    """Reads written procedures for the ``/codify`` turn; built by the worker."""

    def __init__(self, pool: AsyncConnectionPool, embedder: Embedder) -> None:
        self.pool = pool
        self.embedder = embedder

    async def for_session(self, query: WrittenQuery) -> WrittenProcedures:
        if query.cause:
            rows = await self._rows(_OF_CAUSE, (query.cause, query.limit))
            if rows:
                return WrittenProcedures(items=await self._items(rows), basis="cause")
        if query.hint.strip():
            vector = (await self.embedder.embed([query.hint]))[0]
            rows = await self._rows(_NEAREST, (np.asarray(vector, dtype=np.float32), query.limit))
            if rows:
                return WrittenProcedures(items=await self._items(rows), basis="nearest")
        return WrittenProcedures(basis="none")

    async def _rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn:
            return list(await (await conn.execute(sql, params)).fetchall())

    async def _items(self, rows: list[tuple[Any, ...]]) -> list[WrittenProcedure]:
        codified = await self._codified()
        return [
            WrittenProcedure(name=name, description=description or "", cause=cause or "",
                             incidents=sorted(incidents or [])[:MAX_INCIDENTS_SHOWN], codified_as=codified.get(name))
            for name, description, cause, incidents, _order, _rank in rows
            if not is_procedure_name(name)
        ]

    async def _codified(self) -> dict[str, str]:
        """Written procedure name → the approved code procedure that was made from it."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT signature, meta->'codified_from' FROM procedures "
                "WHERE status = 'approved' AND jsonb_typeof(meta->'codified_from') = 'array'")).fetchall()
        return {str(written): signature for signature, names in rows for written in names}
