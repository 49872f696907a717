"""Read-only answers from the knowledge store, for `bamboo mcp serve` (other agents asking what
Bamboo has learned). Opens its pool lazily, inside whatever event loop the MCP server runs.

It also browses (``KnowledgeBrowser``), through the same bounded reads the console's knowledge page uses
(``bamboo.store.knowledge_browse``), so the server offers the knowledge itself as resources."""

from __future__ import annotations

import asyncio

from bamboo.embeddings.base import Embedder
from bamboo.embeddings.factory import build_embedder
from bamboo.mcp.knowledge_server import CauseMatch, IncidentMatch, ProcedureMatch
from bamboo.settings import Settings
from bamboo.store import Store, open_configured_store
from bamboo.store.knowledge_browse import CauseDetail, CausePage, KnowledgeBrowse


class PgKnowledgeReader:
    def __init__(self, settings: Settings, *, store: Store | None = None, embedder: Embedder | None = None) -> None:
        self._settings = settings
        self._store = store
        self._embedder = embedder or build_embedder(settings)
        self._lock = asyncio.Lock()

    async def _open(self) -> Store:
        async with self._lock:
            if self._store is None:
                self._store = await open_configured_store(self._settings, self._embedder.dim, self._embedder.model_id,
                                                          max_size=2, for_worker=False)
        return self._store

    async def causes_for_symptom(self, symptom: str, limit: int) -> list[CauseMatch]:
        """Causes of the stored incidents whose symptom text is closest to the question."""
        store = await self._open()
        [vec] = await self._embedder.embed([symptom])
        hits = await store.knowledge.search_passages(vec, k=max(limit * 4, 10), section="Symptom")
        best: dict[str, float] = {}
        for h in hits:
            best[h.graph_id] = max(best.get(h.graph_id, 0.0), h.score)
        if not best:
            return []
        async with store.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT c.name, c.description, p.graph_id FROM edge_provenance p JOIN edges e ON e.id = p.edge_id "
                "JOIN nodes c ON c.id = e.dst JOIN nodes s ON s.id = e.src WHERE e.kind = 'indicate' "
                "AND c.kind = 'Cause' AND s.name NOT LIKE 'TaskStatus%%' AND p.graph_id = ANY(%s)",
                (list(best),),
            )).fetchall()
        causes: dict[str, CauseMatch] = {}
        for name, detail, graph_id in rows:
            m = causes.setdefault(name, CauseMatch(cause=name, detail=detail, score=0.0, incident_count=0))
            m.score = max(m.score, round(best[graph_id], 4))
            m.incident_count += 1
        return sorted(causes.values(), key=lambda m: (-m.score, -m.incident_count, m.cause))[:limit]

    async def similar_incidents(self, description: str, limit: int) -> list[IncidentMatch]:
        store = await self._open()
        [vec] = await self._embedder.embed([description])
        hits = await store.knowledge.search_passages(vec, k=max(limit * 4, 10))
        best: dict[str, float] = {}
        for h in hits:
            best[h.graph_id] = max(best.get(h.graph_id, 0.0), h.score)
        ranked = sorted(best.items(), key=lambda kv: -kv[1])[:limit]
        out = []
        for graph_id, score in ranked:
            view = await store.knowledge.graph_view(graph_id)
            if view is None:
                continue
            cause = next((e["dst"].split(":", 1)[1] for e in view["edges"] if e["kind"] == "indicate"), None)
            resolution = next((e["dst"].split(":", 1)[1] for e in view["edges"] if e["kind"] == "solved_by"), None)
            out.append(IncidentMatch(incident_id=view["incident_id"], summary=view["summary"], cause=cause,
                                     resolution=resolution, score=round(score, 4)))
        return out

    async def procedures_for_cause(self, cause: str, limit: int) -> list[ProcedureMatch]:
        """Investigation steps captured for the cause, as each incident recorded them, most used first."""
        store = await self._open()
        async with store.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT p.graph_id, d.name, (p.params->>'order')::int AS ord, e.frequency "
                "FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'investigated_by' "
                "JOIN nodes d ON d.id = e.dst JOIN edge_provenance p ON p.edge_id = e.id "
                "WHERE c.kind = 'Cause' AND lower(c.name) = lower(%s) ORDER BY p.graph_id, ord",
                (cause,),
            )).fetchall()
        by_graph: dict[str, list[tuple[str, int]]] = {}
        for graph_id, step, _order, freq in rows:
            by_graph.setdefault(graph_id, []).append((step, freq))
        merged: dict[tuple[str, ...], ProcedureMatch] = {}
        for steps in by_graph.values():
            key = tuple(s for s, _ in steps)
            m = merged.setdefault(key, ProcedureMatch(cause=cause, steps=list(key), times_used=0))
            m.times_used += 1
        return sorted(merged.values(), key=lambda m: -m.times_used)[:limit]

    async def list_causes(self, query: str, offset: int, limit: int) -> CausePage:
        """One page of the known causes whose name or description holds ``query``, most incidents first."""
        return await KnowledgeBrowse((await self._open()).pool).causes(query, offset, limit)

    async def cause_detail(self, cause_id: int) -> CauseDetail | None:
        return await KnowledgeBrowse((await self._open()).pool).cause(cause_id)


def from_settings(settings: Settings) -> PgKnowledgeReader:
    """Factory for `bamboo mcp serve --reader bamboo.mcp.knowledge_reader:from_settings` (the default)."""
    return PgKnowledgeReader(settings)
