"""Graph and vector writes in one transaction, idempotent by construction.

Nodes upsert on (kind, name); edges on (src, kind, dst) with one provenance row per graph; passage
ids are derived from (graph_id, section, key). Writing the same graph twice changes no row count,
and re-writing a graph replaces its provenance and passages instead of piling them up.
Rows are written in a sorted order so concurrent writers lock in the same order and do not deadlock.
Counts analysis reads per node (how many graphs name it, `node_incidents`) are kept by the same
transaction, so reading a common node's count never means counting its provenance.

A write may carry its *origin* (the batch storing it and the file it came from) and the audit row
that describes it. Within one origin scope a graph id belongs to one source: a second file with the
same id is refused (a `DuplicateGraph`), not allowed to overwrite the first. The audit row is
appended in the same transaction as the graph, keyed by the subject (scope and graph), so a write
that commits is audited exactly once however often it is retried or repeated.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from psycopg import sql
from psycopg.errors import DeadlockDetected
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random
from opentelemetry import trace
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from bamboo.audit import AuditEvent
from bamboo.models.graph import GraphNode, GraphWrite, PassageDraft, WriteStats
from bamboo.store.audit_log import PostgresAuditLog
from bamboo.store.outage import NO_WAIT, OutagePolicy, waits_out_outages

_tracer = trace.get_tracer("bamboo.store")

# Candidates a passage search asks of an HNSW scan (pgvector's default is 40, which found 0.92 of the
# exact 10 nearest at 10k clustered passages). Chosen by bench/retrieval (recall@10 against exact
# search at 10k and 100k passages, with its latency): at 100 a query far from a section's rows (asked
# of the section, not from it) found 0.95 of them at 10k, at 200 0.99, for a few ms more.
EF_SEARCH = 200
# The sections accumulation writes, large enough for the table-wide index to pay: a search within one of them
# asks the index for EF_SEARCH candidates and filters them; any other section (an operator's notes, a small
# one) is scanned exactly, which at 100k passages was as fast and never missed (bench/retrieval).
INDEXED_SECTIONS = frozenset({"Symptom", "Task_Context", "Cause"})

PASSAGE_NAMESPACE = uuid.UUID("7d6f3f2e-7c38-4f0e-9a49-2b7c55b0a001")


# SQL: the node `{node}` belongs to a stored graph. Nodes and edges commit before their graph (`_write_graphs`),
# so a write that dies in between leaves nodes no graph holds. A stored graph names a node through its edges'
# provenance, counted in node_incidents; a node with no edge at all was stored alone (an incident with neither
# cause nor context keeps its symptoms so), while one whose only edges no graph supports is such a leftover.
# Indexed lookups per node: node_incidents' key, edges' (src, kind, dst) key and edges_dst.
STORED_NODE = ("(EXISTS (SELECT 1 FROM node_incidents ni WHERE ni.node_id = {node} AND ni.incidents > 0) "
               "OR (NOT EXISTS (SELECT 1 FROM edges x WHERE x.src = {node}) "
               "AND NOT EXISTS (SELECT 1 FROM edges x WHERE x.dst = {node})))")


def passage_id(graph_id: str, section: str, key: str) -> uuid.UUID:
    return uuid.uuid5(PASSAGE_NAMESPACE, f"{graph_id}\x1f{section}\x1f{key}")


def passage_query(section: str | None) -> sql.Composed:
    """The nearest-passages query (parameters: the query vector twice, then k). The section is written
    as a constant, not a parameter: the planner matches a partial index's predicate against the query
    text, and a prepared statement's generic plan would not see a parameter's value."""
    where = sql.SQL("WHERE section = {} ").format(sql.Literal(section)) if section else sql.SQL("")
    return sql.SQL("SELECT graph_id, section, content, 1 - (embedding <=> %s) AS score, meta FROM passages "
                   "{}ORDER BY embedding <=> %s LIMIT %s").format(where)


def _vector(vec: list[float] | None) -> np.ndarray | None:
    """float32 arrays travel in pgvector's binary form: a whole column as one vector[] parameter,
    without formatting hundreds of floats as text per row."""
    return None if vec is None else np.asarray(vec, dtype=np.float32)


@dataclass(frozen=True)
class GraphOrigin:
    """Who stores a graph from where. `scope` is the batch (or the workflow) storing it; `source` the
    incident's file (`path` or `path:line`)."""

    scope: str
    source: str
    content_hash: str | None = None  # fingerprint of the file's incident: a later batch skips it while it matches


@dataclass(frozen=True)
class DuplicateGraph:
    """A write refused because the same scope already stored this graph id from another source."""

    graph_id: str
    source: str
    first_source: str

    def reason(self) -> str:
        return (f"duplicate incident: graph {self.graph_id} was already stored from {self.first_source} in this "
                "batch; give each incident its own jediTaskID/status (or incident_id)")


# Builds a stored graph's audit row (and its dedup key) from what the write stored.
AuditFor = Callable[[WriteStats], tuple[AuditEvent, str | None]]


@dataclass
class GraphVectors:
    """One graph to write with its vectors: one per passage, and the embeddings of the canonical
    names it introduces (kept on new nodes so later synonyms can be matched against them). With an
    `origin` it is checked against the scope's other sources; with `audit` its audit row commits
    with it; `human_requests` are recorded with it."""

    write: GraphWrite
    embeddings: list[list[float]]
    canonical_embeddings: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    origin: GraphOrigin | None = None
    audit: AuditFor | None = None
    human_requests: list[str] = field(default_factory=list)


def _merged_nodes(items: list[GraphVectors]) -> list[tuple[GraphNode, list[float] | None]]:
    """Nodes of all graphs, one per (kind, name), merged as `KnowledgeGraph.add_node` merges them
    (first description, first value per prop key) — one statement may not upsert a row twice."""
    merged: dict[tuple[str, str], tuple[GraphNode, list[float] | None]] = {}
    for item in items:
        for n in item.write.graph.nodes:
            key = (n.kind, n.name)
            vec = item.canonical_embeddings.get(key)
            seen = merged.get(key)
            if seen is None:
                # Merging below only sets the description and adds top-level prop keys: a copy of
                # the props dict keeps the caller's node intact without a deep copy of every value.
                merged[key] = (n.model_copy(update={"props": dict(n.props)}), vec)
                continue
            node, old_vec = seen
            if not node.description and n.description:
                node.description = n.description
            node.props.update({k: v for k, v in n.props.items() if k not in node.props})
            merged[key] = (node, old_vec if old_vec is not None else vec)
    return [merged[k] for k in sorted(merged)]


class KbStats(BaseModel):
    graphs: int
    nodes: dict[str, int]
    edges: dict[str, int]
    provenance: int
    passages: int
    blobs: int
    audit_rows: int
    human_requests_open: int


class StoredGraph(BaseModel):
    graph_id: str
    incident_id: str
    task_id: int | None = None


class StoredPassageHit(BaseModel):
    graph_id: str
    section: str
    content: str
    score: float
    meta: dict[str, Any]


class KnowledgeStore:
    def __init__(self, pool: AsyncConnectionPool, *, audit: PostgresAuditLog | None = None,
                 outage: OutagePolicy = NO_WAIT) -> None:
        self._pool = pool
        self.audit = audit or PostgresAuditLog(pool, outage=outage)
        self.outage = outage

    # ------------------------------------------------------------------ writes
    async def write_graph(self, write: GraphWrite, embeddings: list[list[float]],
                          canonical_embeddings: dict[tuple[str, str], list[float]] | None = None) -> WriteStats:
        [stats] = await self.write_graphs([GraphVectors(write, embeddings, canonical_embeddings or {})])
        assert isinstance(stats, WriteStats)  # only a write with an origin can be a duplicate
        return stats

    @waits_out_outages("write incident graphs")
    async def write_graphs(self, items: list[GraphVectors]) -> list[WriteStats | DuplicateGraph]:
        """Many graphs in one transaction and one statement per table: a populate batch commits
        incidents in groups, so the store's cost per incident shrinks as the group grows.

        Equivalent to writing them one after the other (a later graph with the same id wins, unless
        both have origins in one scope: then the first stays and the later is a `DuplicateGraph`),
        which the tests check; results come back in input order."""
        for item in items:
            if len(item.embeddings) != len(item.write.passages):
                raise ValueError(f"graph {item.write.graph_id}: one embedding per passage is required")
        if not items:
            return []
        with _tracer.start_as_current_span("store.write_graphs") as span:
            span.set_attribute("bamboo.graphs", len(items))
            span.set_attribute("bamboo.graph_id", items[0].write.graph_id)
            span.set_attribute("bamboo.nodes", sum(len(i.write.graph.nodes) for i in items))
            duplicates = await self._duplicates(items)
            kept = [item for i, item in enumerate(items) if i not in duplicates]
            # A repeated graph id: the last write wins for what a graph owns (provenance, passages),
            # while every write's nodes still merge in, as they would written one after the other.
            latest = {item.write.graph_id: item for item in kept}
            nodes = _merged_nodes(kept)
            # Concurrent group writes lock rows in sorted order, but the frequency update and a
            # re-population's stale edges are not ordered: a deadlock aborts one writer, which
            # simply tries again (the whole write is one transaction).
            async for attempt in AsyncRetrying(retry=retry_if_exception_type(DeadlockDetected), reraise=True,
                                               stop=stop_after_attempt(5), wait=wait_random(0.01, 0.2)):
                with attempt:
                    stats, raced = await self._write_graphs(list(latest.values()), nodes)
        out: list[WriteStats | DuplicateGraph] = []
        for i, item in enumerate(items):
            graph_id = item.write.graph_id
            if i in duplicates:
                out.append(duplicates[i])
            elif graph_id in stats:
                out.append(stats[graph_id])
            else:  # a concurrent writer of the same scope stored this id from its source first
                out.append(DuplicateGraph(graph_id, item.origin.source if item.origin else "", raced.get(graph_id, "?")))
        return out

    async def _duplicates(self, items: list[GraphVectors]) -> dict[int, DuplicateGraph]:
        """Items whose graph id this scope already stored from another source: earlier in this group,
        or in the database (looked up first, so a refused graph adds no node; the write itself
        re-checks, for a concurrent writer of the same id)."""
        out: dict[int, DuplicateGraph] = {}
        first_in_group: dict[tuple[str, str], str] = {}
        for i, item in enumerate(items):
            if item.origin is None:
                continue
            key = (item.origin.scope, item.write.graph_id)
            first = first_in_group.setdefault(key, item.origin.source)
            if first != item.origin.source:
                out[i] = DuplicateGraph(item.write.graph_id, item.origin.source, first)
        keyed = [(i, item) for i, item in enumerate(items) if item.origin is not None and i not in out]
        if not keyed:
            return out
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT graph_id, scope, source FROM graphs WHERE graph_id = ANY(%b)",
                ([item.write.graph_id for _, item in keyed],))).fetchall()
        stored = {(scope, graph_id): source for graph_id, scope, source in rows if scope is not None}
        for i, item in keyed:
            assert item.origin is not None
            found = stored.get((item.origin.scope, item.write.graph_id))
            if found is not None and found != item.origin.source:
                out[i] = DuplicateGraph(item.write.graph_id, item.origin.source, found)
        return out

    async def _write_graphs(self, items: list[GraphVectors], nodes: list[tuple[GraphNode, list[float] | None]],
                            ) -> tuple[dict[str, WriteStats], dict[str, str]]:
        """Set-based statements (one per table) rather than one per row or per graph.

        Nodes and edges first in a short transaction of their own, then one transaction for the rest, ordered
        for concurrent writers: shared rows (the Symptom and feature nodes most incidents
        name, the edges between them) are not locked while the slow part — passages and their HNSW
        index — is written; existing nodes are only locked when they actually change, and the edge
        counters are locked in id order at the very end, just before commit. Taking those locks in
        their own statement also means the counts are computed after any concurrent writer of the
        same edge has committed, so no provenance goes uncounted.

        Returns the stats of the graphs written and, for any the scope's other source held (a
        concurrent duplicate), that source."""
        edge_keys = sorted({e.key() for item in items for e in item.write.graph.edges})
        graph_ids = [item.write.graph_id for item in items]
        async with self._pool.connection() as conn:
            # Nodes and edges commit first, in their own short transaction: concurrent writers proposing
            # the same new node or edge would otherwise wait for each other's whole write. One outliving
            # a failed write may never be named again (the batch is cancelled, the graph refused), so no
            # reader takes it for knowledge: an edge counts only through its provenance (frequency 0 until
            # then; analysis reads frequency > 0), a node only while a stored graph holds it (`STORED_NODE`:
            # `nearest_nodes`, `known_symptoms`); nodes and edges are shared, never owned.
            async with conn.transaction():
                ids = await self._upsert_nodes(conn, nodes)
                edge_id = await self._insert_edges(conn, [(ids[k[0]], k[1], ids[k[2]]) for k in edge_keys])
            async with conn.transaction():
                # A graph another source of the same scope holds is left alone (the WHERE below) and
                # not returned: it is a duplicate, found here even when a concurrent writer won the race.
                written = {r[0] for r in await (await conn.execute(
                    "INSERT INTO graphs (graph_id, incident_id, task_id, summary, warnings, scope, source, "
                    "content_hash) "
                    "SELECT g, i, t, s, w::jsonb, sc, so, h FROM unnest(%b::text[], %b::text[], %b::bigint[], "
                    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[]) AS x(g, i, t, s, w, sc, so, h) "
                    "ORDER BY g "
                    "ON CONFLICT (graph_id) DO UPDATE SET incident_id = EXCLUDED.incident_id, "
                    "task_id = EXCLUDED.task_id, summary = EXCLUDED.summary, warnings = EXCLUDED.warnings, "
                    "scope = EXCLUDED.scope, source = EXCLUDED.source, content_hash = EXCLUDED.content_hash, "
                    "stored_at = now() "
                    "WHERE graphs.scope IS NULL OR EXCLUDED.scope IS NULL OR graphs.scope <> EXCLUDED.scope "
                    "OR graphs.source IS NOT DISTINCT FROM EXCLUDED.source RETURNING graph_id",
                    (graph_ids, [i.write.incident_id for i in items], [i.write.task_id for i in items],
                     [i.write.summary for i in items], [json.dumps(i.write.warnings) for i in items],
                     [i.origin.scope if i.origin else None for i in items],
                     [i.origin.source if i.origin else None for i in items],
                     [i.origin.content_hash if i.origin else None for i in items]),
                )).fetchall()}
                raced: dict[str, str] = {}
                if len(written) < len(items):
                    held = [g for g in graph_ids if g not in written]
                    raced = dict(await (await conn.execute(
                        "SELECT graph_id, source FROM graphs WHERE graph_id = ANY(%b)", (held,))).fetchall())
                    items = [i for i in items if i.write.graph_id in written]
                    graph_ids = [i.write.graph_id for i in items]
                # The nodes these graphs named before this write (a re-population), read after the graphs
                # rows are locked above, so a concurrent writer of the same graph has committed its own.
                named_before = await self._nodes_named(conn, graph_ids)
                passages, pids = await self._write_passages(conn, items, ids, graph_ids)

                # One provenance row per (edge, graph); a graph that lists an edge twice keeps its last entry.
                provenance: dict[tuple[int, str], tuple[float, str]] = {}
                edges_of: dict[str, list[int]] = {}
                for item in items:
                    gid = item.write.graph_id
                    for e in item.write.graph.edges:
                        eid = edge_id[(ids[e.src.key()], e.kind, ids[e.dst.key()])]
                        provenance[(eid, gid)] = (e.confidence, json.dumps(e.params, default=str))
                        edges_of.setdefault(gid, []).append(eid)
                prov = sorted(provenance.items())
                if prov:
                    await conn.execute(
                        "INSERT INTO edge_provenance (edge_id, graph_id, confidence, params) "
                        "SELECT e, g, c, p::jsonb FROM unnest(%b::bigint[], %b::text[], %b::real[], %b::text[]) "
                        "AS t(e, g, c, p) ORDER BY e, g "
                        "ON CONFLICT (edge_id, graph_id) DO UPDATE SET confidence = EXCLUDED.confidence, params = EXCLUDED.params",
                        ([k[0] for k, _ in prov], [k[1] for k, _ in prov], [v[0] for _, v in prov], [v[1] for _, v in prov]),
                    )
                # Re-populating a graph replaces its provenance: drop links it no longer claims.
                stale = await (await conn.execute(
                    "DELETE FROM edge_provenance p WHERE p.graph_id = ANY(%b) AND NOT EXISTS ("
                    "  SELECT 1 FROM unnest(%b::bigint[], %b::text[]) AS k(e, g) WHERE k.e = p.edge_id AND k.g = p.graph_id) "
                    "RETURNING edge_id",
                    (graph_ids, [k[0] for k, _ in prov], [k[1] for k, _ in prov]),
                )).fetchall()
                touched = sorted({k[0] for k, _ in prov} | {r[0] for r in stale})
                if touched:
                    # NO KEY UPDATE: does not conflict with the key-share locks other writers' provenance
                    # rows take on the same edges, and id order keeps counter writers from deadlocking.
                    await conn.execute("SELECT id FROM edges WHERE id = ANY(%b) ORDER BY id FOR NO KEY UPDATE",
                                       (touched,))
                    await conn.execute(
                        "UPDATE edges e SET frequency = p.n, confidence = p.c FROM ("
                        "  SELECT edge_id, count(*) AS n, avg(confidence) AS c FROM edge_provenance "
                        "  WHERE edge_id = ANY(%b) GROUP BY edge_id) p WHERE e.id = p.edge_id",
                        (touched,),
                    )
                    await conn.execute(
                        "DELETE FROM edges WHERE id = ANY(%b) AND NOT EXISTS "
                        "(SELECT 1 FROM edge_provenance p WHERE p.edge_id = edges.id)",
                        (touched,),
                    )
                named_now = {(ids[end.key()], item.write.graph_id) for item in items
                             for e in item.write.graph.edges for end in (e.src, e.dst)}
                await self._count_node_incidents(conn, named_before, named_now)
                requests = sorted({(i.write.graph_id, r) for i in items for r in i.human_requests})
                if requests:
                    await conn.execute(
                        "INSERT INTO human_requests (graph_id, request) SELECT g, r FROM unnest(%b::text[], %b::text[]) "
                        "AS t(g, r) ON CONFLICT DO NOTHING",
                        ([g for g, _ in requests], [r for _, r in requests]))
                per_graph_passages: dict[str, int] = {}
                for g, _, _ in passages.values():
                    per_graph_passages[g] = per_graph_passages.get(g, 0) + 1
                stats = {item.write.graph_id: WriteStats(
                             graph_id=item.write.graph_id, nodes=len({(n.kind, n.name) for n in item.write.graph.nodes}),
                             edges=len(set(edges_of.get(item.write.graph_id, []))),
                             passages=per_graph_passages.get(item.write.graph_id, 0))
                         for item in items}
                # Last, just before the commit: the audit rows join this transaction, so a stored graph
                # always has its row and a rolled-back one never does; the chain lock is held only briefly.
                appended = await self.audit.append_in(
                    conn, [item.audit(stats[item.write.graph_id]) for item in items if item.audit is not None])
            await self.audit.checkpoint(conn, appended)
        return stats, raced

    @staticmethod
    async def _nodes_named(conn: Any, graph_ids: list[str]) -> set[tuple[int, str]]:
        """(node id, graph id) for every node a stored graph's provenance names: either end of its edges."""
        if not graph_ids:
            return set()
        rows = await (await conn.execute(
            "SELECT DISTINCT v.n, p.graph_id FROM edge_provenance p JOIN edges e ON e.id = p.edge_id "
            "CROSS JOIN LATERAL (VALUES (e.src), (e.dst)) AS v(n) WHERE p.graph_id = ANY(%b)", (graph_ids,))).fetchall()
        return {(r[0], r[1]) for r in rows}

    @staticmethod
    async def _count_node_incidents(conn: Any, before: set[tuple[int, str]], now: set[tuple[int, str]]) -> None:
        """Keep node_incidents (how many graphs name each node; migration 024) equal to a count of the
        provenance: each node gains the graphs that name it now and did not before, and loses the reverse.
        A counter row is shared by every writer naming the node (vo=atlas by nearly all), so it is written
        last, in node order, like the edge counters: concurrent writers queue on it briefly, in one order."""
        delta: dict[int, int] = {}
        for node, _ in now - before:
            delta[node] = delta.get(node, 0) + 1
        for node, _ in before - now:
            delta[node] = delta.get(node, 0) - 1
        changed = sorted((n, d) for n, d in delta.items() if d)
        if changed:
            await conn.execute(
                "INSERT INTO node_incidents AS ni (node_id, incidents) "
                "SELECT n, d FROM unnest(%b::bigint[], %b::int[]) AS t(n, d) ORDER BY n "
                "ON CONFLICT (node_id) DO UPDATE SET incidents = ni.incidents + EXCLUDED.incidents",
                ([n for n, _ in changed], [d for _, d in changed]))

    @staticmethod
    async def _upsert_nodes(conn: Any, nodes: list[tuple[GraphNode, list[float] | None]]) -> dict[tuple[str, str], int]:
        """Insert new nodes; touch an existing one only when this write adds to it (a first
        description, a new prop key, a missing embedding) — the same result as an upsert, without
        locking the hot shared nodes on every write."""
        if not nodes:
            return {}
        columns = ([n.kind for n, _ in nodes], [n.name for n, _ in nodes], [n.description for n, _ in nodes],
                   [json.dumps(n.props, default=str) for n, _ in nodes], [_vector(v) for _, v in nodes])
        await conn.execute(
            "INSERT INTO nodes (kind, name, description, props, embedding) "
            "SELECT k, n, d, p::jsonb, e FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::vector[]) "
            "AS t(k, n, d, p, e) ORDER BY k, n ON CONFLICT (kind, name) DO NOTHING",
            columns,
        )
        await conn.execute(
            "UPDATE nodes SET "
            "description = CASE WHEN nodes.description = '' THEN t.d ELSE nodes.description END, "
            "props = t.p::jsonb || nodes.props, embedding = COALESCE(nodes.embedding, t.e) "
            "FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::vector[]) AS t(k, n, d, p, e) "
            "WHERE nodes.kind = t.k AND nodes.name = t.n AND ("
            "  (nodes.description = '' AND t.d <> '') OR (t.p::jsonb || nodes.props) <> nodes.props "
            "  OR (nodes.embedding IS NULL AND t.e IS NOT NULL))",
            columns,
        )
        rows = await (await conn.execute(
            "SELECT id, kind, name FROM nodes JOIN unnest(%b::text[], %b::text[]) AS t(k, n) "
            "ON nodes.kind = t.k AND nodes.name = t.n",
            columns[:2],
        )).fetchall()
        return {(r[1], r[2]): r[0] for r in rows}

    @staticmethod
    async def _insert_edges(conn: Any, triples: list[tuple[int, str, int]]) -> dict[tuple[int, str, int], int]:
        if not triples:
            return {}
        columns = ([t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples])
        await conn.execute(
            "INSERT INTO edges (src, kind, dst) "
            "SELECT s, k, d FROM unnest(%b::bigint[], %b::text[], %b::bigint[]) AS t(s, k, d) "
            "ORDER BY s, k, d ON CONFLICT (src, kind, dst) DO NOTHING",
            columns,
        )
        rows = await (await conn.execute(
            "SELECT e.id, e.src, e.kind, e.dst FROM edges e "
            "JOIN unnest(%b::bigint[], %b::text[], %b::bigint[]) AS t(s, k, d) "
            "ON e.src = t.s AND e.kind = t.k AND e.dst = t.d",
            columns,
        )).fetchall()
        return {(r[1], r[2], r[3]): r[0] for r in rows}

    @staticmethod
    async def _write_passages(conn: Any, items: list[GraphVectors], ids: dict[tuple[str, str], int],
                              graph_ids: list[str]) -> tuple[dict[uuid.UUID, tuple[str, PassageDraft, list[float]]], list]:
        passages: dict[uuid.UUID, tuple[str, PassageDraft, list[float]]] = {}
        for item in items:
            for d, v in zip(item.write.passages, item.embeddings):
                passages[passage_id(item.write.graph_id, d.section, d.key)] = (item.write.graph_id, d, v)
        pids = sorted(passages)
        if pids:
            rows_p = [passages[i] for i in pids]
            await conn.execute(
                "INSERT INTO passages (id, graph_id, section, node_id, content, embedding, meta) "
                "SELECT i, g, s, n, c, e, m::jsonb FROM unnest(%b::uuid[], %b::text[], %b::text[], "
                "%b::bigint[], %b::text[], %b::vector[], %b::text[]) AS t(i, g, s, n, c, e, m) ORDER BY i "
                "ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
                "embedding = EXCLUDED.embedding, node_id = EXCLUDED.node_id, meta = EXCLUDED.meta",
                (pids, [g for g, _, _ in rows_p], [d.section for _, d, _ in rows_p],
                 [ids.get(d.node.key()) if d.node else None for _, d, _ in rows_p],
                 [d.content for _, d, _ in rows_p], [_vector(v) for _, _, v in rows_p],
                 [json.dumps({"key": d.key}) for _, d, _ in rows_p]),
            )
        await conn.execute(
            "DELETE FROM passages p WHERE p.graph_id = ANY(%b) AND NOT (p.id = ANY(%b))", (graph_ids, pids)
        )
        return passages, pids

    @waits_out_outages("look up what a batch already stored")
    async def stored_graphs(self, scope: str, sources: list[str]) -> dict[str, "StoredGraph"]:
        """Of these sources, those the scope has stored, with their graph. A retried slice or an
        escalated incident asks before learning again, so what was stored is neither redone nor
        reported failed."""
        if not sources:
            return {}
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT source, graph_id, incident_id, task_id FROM graphs WHERE scope = %s AND source = ANY(%b)",
                (scope, sources),
            )).fetchall()
        return {r[0]: StoredGraph(graph_id=r[1], incident_id=r[2], task_id=r[3]) for r in rows}

    @waits_out_outages("look up what was learned before")
    async def learned_contents(self, content_hashes: list[str]) -> set[str]:
        """Of these incident fingerprints, those a stored graph was learned from (by any batch): a
        batch skips those incidents instead of asking the model about them again."""
        if not content_hashes:
            return set()
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT DISTINCT content_hash FROM graphs WHERE content_hash = ANY(%b)", (content_hashes,),
            )).fetchall()
        return {r[0] for r in rows}

    # ------------------------------------------------------------------ reads
    @waits_out_outages("match names against the stored nodes")
    async def nearest_nodes(self, queries: Sequence[tuple[str, list[float]]], threshold: float) -> list[str | None]:
        """For each (kind, embedding) pair, the existing node of that kind whose name means the same
        (cosine ≥ threshold), if any; all pairs in one round trip. Only nodes a stored graph holds count
        (`STORED_NODE`): a node left by a write that died before its graph committed would otherwise hand a
        later incident the name of a cause no stored incident has."""
        if not queries:
            return []
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT q.i, m.name, m.sim FROM unnest(%b::text[], %b::vector[]) WITH ORDINALITY AS q(k, e, i) "
                "CROSS JOIN LATERAL (SELECT name, 1 - (embedding <=> q.e) AS sim FROM nodes "
                "  WHERE kind = q.k AND embedding IS NOT NULL AND " + STORED_NODE.format(node="nodes.id") + " "
                "  ORDER BY embedding <=> q.e LIMIT 1) m",
                ([k for k, _ in queries], [_vector(v) for _, v in queries]),
            )).fetchall()
        found = {int(i): name for i, name, sim in rows if sim >= threshold}
        return [found.get(i + 1) for i in range(len(queries))]

    async def search_passages(self, embedding: list[float], k: int = 5, section: str | None = None) -> list[StoredPassageHit]:
        """The k passages nearest to `embedding`, within `section` when given.

        pgvector 0.6 has no iterative index scan: a filter runs after the HNSW scan has yielded its
        `ef_search` candidates, so a section that is rare near the query can come back short. A search
        within a large section (``INDEXED_SECTIONS``) asks the table-wide index for EF_SEARCH candidates
        (more for a larger k) and, should that still yield fewer than k rows, scans the section exactly:
        never short while the section holds k rows. Any other section is scanned exactly at once. One index
        serves every section: per-section partial indexes were measured (bench/retrieval) and cost twice
        the insert time for lower recall on queries far from a section."""
        vec = np.asarray(embedding, dtype=np.float32)
        async with self._pool.connection() as conn:
            rows: list[Any] = []
            if not section or section in INDEXED_SECTIONS:  # an empty section means no filter
                # One round trip for the setting, the query and the transaction that scopes the setting.
                async with conn.pipeline():
                    async with conn.transaction():
                        await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)",
                                           [str(min(1000, max(EF_SEARCH, 4 * k)))])
                        cur = await conn.execute(passage_query(section or None), [vec, vec, k])
                    rows = await cur.fetchall()
            if section and len(rows) < k:
                # MATERIALIZED keeps the planner from turning this back into an index scan.
                rows = await (await conn.execute(
                    "WITH candidates AS MATERIALIZED (SELECT graph_id, section, content, meta, "
                    "embedding <=> %s AS distance FROM passages WHERE section = %s) "
                    "SELECT graph_id, section, content, 1 - distance, meta FROM candidates "
                    "ORDER BY distance LIMIT %s", [vec, section, k])).fetchall()
        return [StoredPassageHit(graph_id=r[0], section=r[1], content=r[2], score=float(r[3]), meta=r[4]) for r in rows]

    async def stats(self) -> KbStats:
        async with self._pool.connection() as conn:
            async def scalar(sql: str) -> int:
                row = await (await conn.execute(sql)).fetchone()
                assert row is not None  # an aggregate always returns a row
                return int(row[0])

            nodes: dict[str, int] = dict(await (await conn.execute(
                "SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind")).fetchall())
            edges: dict[str, int] = dict(await (await conn.execute(
                "SELECT kind, count(*) FROM edges GROUP BY kind ORDER BY kind")).fetchall())
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
            counts: dict[str, int] = {}
            for t in tables:
                row = await (await conn.execute(f"SELECT count(*) FROM {t}")).fetchone()
                assert row is not None  # count(*) always returns a row
                counts[t] = row[0]
            return counts
