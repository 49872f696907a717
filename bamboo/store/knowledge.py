"""Graph and vector writes in one transaction, idempotent by construction.

Nodes upsert on (kind, name); edges on (src, kind, dst) with one provenance row per graph; passage
ids are derived from (graph_id, section, key). Writing the same graph twice changes no row count,
and re-writing a graph replaces its provenance and passages instead of piling them up.
Rows are written in a sorted order so concurrent writers lock in the same order and do not deadlock.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
from opentelemetry import trace
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from bamboo.models.graph import GraphWrite, WriteStats

_tracer = trace.get_tracer("bamboo.store")

PASSAGE_NAMESPACE = uuid.UUID("7d6f3f2e-7c38-4f0e-9a49-2b7c55b0a001")


def passage_id(graph_id: str, section: str, key: str) -> uuid.UUID:
    return uuid.uuid5(PASSAGE_NAMESPACE, f"{graph_id}\x1f{section}\x1f{key}")


def _vector_text(vec: list[float] | None) -> str | None:
    """pgvector's text form; lets a whole column of vectors travel as one text[] parameter."""
    if vec is None:
        return None
    return "[" + ",".join(f"{float(x):.7g}" for x in vec) + "]"


class KbStats(BaseModel):
    graphs: int
    nodes: dict[str, int]
    edges: dict[str, int]
    provenance: int
    passages: int
    blobs: int
    audit_rows: int
    human_requests_open: int


class StoredPassageHit(BaseModel):
    graph_id: str
    section: str
    content: str
    score: float
    meta: dict[str, Any]


class KnowledgeStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    # ------------------------------------------------------------------ writes
    async def write_graph(self, write: GraphWrite, embeddings: list[list[float]],
                          canonical_embeddings: dict[tuple[str, str], list[float]] | None = None) -> WriteStats:
        if len(embeddings) != len(write.passages):
            raise ValueError("one embedding per passage is required")
        with _tracer.start_as_current_span("store.write_graph") as span:
            span.set_attribute("bamboo.graph_id", write.graph_id)
            span.set_attribute("bamboo.nodes", len(write.graph.nodes))
            return await self._write_graph(write, embeddings, canonical_embeddings or {})

    async def _write_graph(self, write: GraphWrite, embeddings: list[list[float]],
                           canonical_embeddings: dict[tuple[str, str], list[float]]) -> WriteStats:
        """Set-based statements (one per table) rather than one per row: a graph write costs a
        handful of round trips whatever the graph's size."""
        nodes = sorted(write.graph.nodes, key=lambda n: (n.kind, n.name))
        edges = sorted(write.graph.edges, key=lambda e: e.key())
        async with self._pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO graphs (graph_id, incident_id, task_id, summary, warnings) VALUES (%s,%s,%s,%s,%s) "
                    "ON CONFLICT (graph_id) DO UPDATE SET incident_id = EXCLUDED.incident_id, "
                    "task_id = EXCLUDED.task_id, summary = EXCLUDED.summary, warnings = EXCLUDED.warnings, "
                    "stored_at = now()",
                    (write.graph_id, write.incident_id, write.task_id, write.summary, json.dumps(write.warnings)),
                )
                rows = await (await conn.execute(
                    "INSERT INTO nodes (kind, name, description, props, embedding) "
                    "SELECT k, n, d, p::jsonb, e::vector FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) "
                    "AS t(k, n, d, p, e) ORDER BY k, n "
                    "ON CONFLICT (kind, name) DO UPDATE SET "
                    "description = CASE WHEN nodes.description = '' THEN EXCLUDED.description ELSE nodes.description END, "
                    "props = EXCLUDED.props || nodes.props, "
                    "embedding = COALESCE(nodes.embedding, EXCLUDED.embedding) "
                    "RETURNING id, kind, name",
                    ([n.kind for n in nodes], [n.name for n in nodes], [n.description for n in nodes],
                     [json.dumps(n.props, default=str) for n in nodes],
                     [_vector_text(canonical_embeddings.get((n.kind, n.name))) for n in nodes]),
                )).fetchall()
                ids: dict[tuple[str, str], int] = {(r[1], r[2]): r[0] for r in rows}

                edge_rows = await (await conn.execute(
                    "INSERT INTO edges (src, kind, dst, confidence) "
                    "SELECT s, k, d, c FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::real[]) AS t(s, k, d, c) "
                    "ORDER BY s, k, d "
                    "ON CONFLICT (src, kind, dst) DO UPDATE SET kind = EXCLUDED.kind RETURNING id, src, kind, dst",
                    ([ids[e.src.key()] for e in edges], [e.kind for e in edges], [ids[e.dst.key()] for e in edges],
                     [e.confidence for e in edges]),
                )).fetchall()
                edge_id = {(r[1], r[2], r[3]): r[0] for r in edge_rows}
                edge_ids = [edge_id[(ids[e.src.key()], e.kind, ids[e.dst.key()])] for e in edges]
                await conn.execute(
                    "INSERT INTO edge_provenance (edge_id, graph_id, confidence, params) "
                    "SELECT e, %s, c, p::jsonb FROM unnest(%s::bigint[], %s::real[], %s::text[]) AS t(e, c, p) ORDER BY e "
                    "ON CONFLICT (edge_id, graph_id) DO UPDATE SET confidence = EXCLUDED.confidence, params = EXCLUDED.params",
                    (write.graph_id, edge_ids, [e.confidence for e in edges],
                     [json.dumps(e.params, default=str) for e in edges]),
                )
                # Re-populating a graph replaces its provenance: drop links it no longer claims.
                stale = await (await conn.execute(
                    "DELETE FROM edge_provenance WHERE graph_id = %s AND NOT (edge_id = ANY(%s)) RETURNING edge_id",
                    (write.graph_id, edge_ids),
                )).fetchall()
                touched = sorted(set(edge_ids) | {r[0] for r in stale})
                await conn.execute(
                    "UPDATE edges e SET frequency = p.n, confidence = p.c FROM ("
                    "  SELECT edge_id, count(*) AS n, avg(confidence) AS c FROM edge_provenance "
                    "  WHERE edge_id = ANY(%s) GROUP BY edge_id) p WHERE e.id = p.edge_id",
                    (touched,),
                )
                await conn.execute(
                    "DELETE FROM edges WHERE id = ANY(%s) AND NOT EXISTS "
                    "(SELECT 1 FROM edge_provenance p WHERE p.edge_id = edges.id)",
                    (touched,),
                )

                unique = {passage_id(write.graph_id, d.section, d.key): (d, v) for d, v in zip(write.passages, embeddings)}
                pids = list(unique)
                drafts = [d for d, _ in unique.values()]
                vectors = [v for _, v in unique.values()]
                if pids:
                    await conn.execute(
                        "INSERT INTO passages (id, graph_id, section, node_id, content, embedding, meta) "
                        "SELECT i, %s, s, n, c, e::vector, m::jsonb FROM unnest(%s::uuid[], %s::text[], %s::bigint[], "
                        "%s::text[], %s::text[], %s::text[]) AS t(i, s, n, c, e, m) ORDER BY i "
                        "ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
                        "embedding = EXCLUDED.embedding, node_id = EXCLUDED.node_id, meta = EXCLUDED.meta",
                        (write.graph_id, pids, [d.section for d in drafts],
                         [ids.get(d.node.key()) if d.node else None for d in drafts],
                         [d.content for d in drafts], [_vector_text(v) for v in vectors],
                         [json.dumps({"key": d.key}) for d in drafts]),
                    )
                await conn.execute(
                    "DELETE FROM passages WHERE graph_id = %s AND NOT (id = ANY(%s))", (write.graph_id, pids)
                )
        return WriteStats(graph_id=write.graph_id, nodes=len(nodes), edges=len(edge_ids), passages=len(pids))

    async def record_human_request(self, graph_id: str, request: str) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO human_requests (graph_id, request) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (graph_id, request),
            )

    # ------------------------------------------------------------------ reads
    async def nearest_node(self, kind: str, embedding: list[float], threshold: float) -> str | None:
        """The existing node of this kind whose name means the same (cosine ≥ threshold), if any."""
        async with self._pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT name, 1 - (embedding <=> %s) AS sim FROM nodes WHERE kind = %s AND embedding IS NOT NULL "
                "ORDER BY embedding <=> %s LIMIT 1",
                (np.asarray(embedding, dtype=np.float32), kind, np.asarray(embedding, dtype=np.float32)),
            )).fetchone()
        if row and row[1] >= threshold:
            return row[0]
        return None

    async def nearest_nodes(self, queries: list[tuple[str, list[float]]], threshold: float) -> list[str | None]:
        """`nearest_node` for many (kind, embedding) pairs in one round trip."""
        if not queries:
            return []
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT q.i, m.name, m.sim FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS q(k, e, i) "
                "CROSS JOIN LATERAL (SELECT name, 1 - (embedding <=> q.e::vector) AS sim FROM nodes "
                "  WHERE kind = q.k AND embedding IS NOT NULL ORDER BY embedding <=> q.e::vector LIMIT 1) m",
                ([k for k, _ in queries], [_vector_text(v) for _, v in queries]),
            )).fetchall()
        found = {int(i): name for i, name, sim in rows if sim >= threshold}
        return [found.get(i + 1) for i in range(len(queries))]

    async def search_passages(self, embedding: list[float], k: int = 5, section: str | None = None) -> list[StoredPassageHit]:
        vec = np.asarray(embedding, dtype=np.float32)
        where, params = ("WHERE section = %s", [section]) if section else ("", [])
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                f"SELECT graph_id, section, content, 1 - (embedding <=> %s) AS score, meta FROM passages {where} "
                "ORDER BY embedding <=> %s LIMIT %s",
                [vec, *params, vec, k],
            )).fetchall()
        return [StoredPassageHit(graph_id=r[0], section=r[1], content=r[2], score=float(r[3]), meta=r[4]) for r in rows]

    async def stats(self) -> KbStats:
        async with self._pool.connection() as conn:
            async def scalar(sql: str) -> int:
                return (await (await conn.execute(sql)).fetchone())[0]

            nodes = dict(await (await conn.execute("SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind")).fetchall())
            edges = dict(await (await conn.execute("SELECT kind, count(*) FROM edges GROUP BY kind ORDER BY kind")).fetchall())
            return KbStats(
                graphs=await scalar("SELECT count(*) FROM graphs"),
                nodes=nodes, edges=edges,
                provenance=await scalar("SELECT count(*) FROM edge_provenance"),
                passages=await scalar("SELECT count(*) FROM passages"),
                blobs=await scalar("SELECT count(*) FROM blobs"),
                audit_rows=await scalar("SELECT count(*) FROM audit"),
                human_requests_open=await scalar("SELECT count(*) FROM human_requests WHERE answer IS NULL"),
            )

    async def graph_view(self, graph_id: str) -> dict[str, Any] | None:
        """Everything one incident contributed: its edges (with both ends), passages and warnings."""
        async with self._pool.connection() as conn:
            g = await (await conn.execute(
                "SELECT incident_id, task_id, summary, warnings, stored_at FROM graphs WHERE graph_id = %s", (graph_id,)
            )).fetchone()
            if g is None:
                return None
            edges = await (await conn.execute(
                "SELECT s.kind, s.name, e.kind, d.kind, d.name, e.frequency, round(e.confidence::numeric, 2) "
                "FROM edge_provenance p JOIN edges e ON e.id = p.edge_id "
                "JOIN nodes s ON s.id = e.src JOIN nodes d ON d.id = e.dst WHERE p.graph_id = %s "
                "ORDER BY e.kind, s.kind, s.name", (graph_id,),
            )).fetchall()
            passages = await (await conn.execute(
                "SELECT section, left(content, 200) FROM passages WHERE graph_id = %s ORDER BY section", (graph_id,)
            )).fetchall()
        return {
            "graph_id": graph_id, "incident_id": g[0], "task_id": g[1], "summary": g[2], "warnings": g[3],
            "stored_at": g[4].isoformat(),
            "edges": [{"src": f"{r[0]}:{r[1]}", "kind": r[2], "dst": f"{r[3]}:{r[4]}", "frequency": r[5],
                       "confidence": float(r[6])} for r in edges],
            "passages": [{"section": r[0], "content": r[1]} for r in passages],
        }

    async def edges_for_graph(self, graph_id: str) -> set[tuple[str, str, str, str, str]]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT s.kind, s.name, e.kind, d.kind, d.name FROM edge_provenance p JOIN edges e ON e.id = p.edge_id "
                "JOIN nodes s ON s.id = e.src JOIN nodes d ON d.id = e.dst WHERE p.graph_id = %s", (graph_id,),
            )).fetchall()
        return {tuple(r) for r in rows}

    async def row_counts(self) -> dict[str, int]:
        tables = ["graphs", "nodes", "edges", "edge_provenance", "passages", "human_requests"]
        async with self._pool.connection() as conn:
            return {t: (await (await conn.execute(f"SELECT count(*) FROM {t}")).fetchone())[0] for t in tables}
