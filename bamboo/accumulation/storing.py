"""Storing extracted graphs: embed, canonicalise, write, audit — for one graph or a group at once.

The per-incident `store_graph` activity stores a group of one; the populate lane stores whatever
incidents finished since its last commit. Grouping pays one embedding call, one nearest-node
query, one transaction and one audit lock per group instead of per incident, which is where a
populate batch spent most of its store cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from bamboo.audit import AuditEvent
from bamboo.embeddings.base import Embedder
from bamboo.models.accumulate import StoreInput
from bamboo.models.graph import GraphWrite, WriteStats
from bamboo.store import Store
from bamboo.store.canonical import canonical_targets, canonicalise_graphs
from bamboo.store.knowledge import GraphVectors


@dataclass(frozen=True)
class StoreRequest:
    """A graph to store and the audit identity of this storing (a retry with the same key is not re-audited)."""

    graph: StoreInput
    run_id: str
    dedup_key: str


class GraphStorer:
    def __init__(self, store: Store, embedder: Embedder, canonical_threshold: float) -> None:
        self.store = store
        self.embedder = embedder
        self.threshold = canonical_threshold

    async def store_many(self, requests: list[StoreRequest]) -> list[WriteStats]:
        if not requests:
            return []
        inputs = [r.graph for r in requests]
        targets = [canonical_targets(i.graph) for i in inputs]
        # Copies: canonical renames below must not change the caller's passages.
        passages = [[p.model_copy() for p in i.passages if p.content.strip()] for i in inputs]
        texts: list[str] = []
        for ts, ps in zip(targets, passages):
            texts += [n.name for n in ts] + [p.content for p in ps]
        vectors = await self.embedder.embed(texts) if texts else []

        per_graph: list[tuple[list[list[float]], list[list[float]]]] = []
        at = 0
        for ts, ps in zip(targets, passages):
            per_graph.append((vectors[at:at + len(ts)], vectors[at + len(ts):at + len(ts) + len(ps)]))
            at += len(ts) + len(ps)
        canon = await canonicalise_graphs([(i.graph, tv) for i, (tv, _) in zip(inputs, per_graph)],
                                          self.store.knowledge, self.threshold)
        writes = []
        for inp, ps, c, (_, pv) in zip(inputs, passages, canon, per_graph):
            for p in ps:
                if p.node is not None:
                    p.node = c.renames.get(p.node.key(), p.node)
            writes.append(GraphVectors(
                GraphWrite(graph_id=inp.graph_id, incident_id=inp.incident_id, task_id=inp.task_id, graph=c.graph,
                           passages=ps, summary=inp.summary, warnings=inp.warnings),
                pv, c.canonical_embeddings))
        stats = await self.store.knowledge.write_graphs(writes)
        for inp in inputs:
            for request in inp.human_requests:
                await self.store.knowledge.record_human_request(inp.graph_id, request)
        await self.store.audit.append_many([
            (AuditEvent(kind="graph_stored", actor="accumulate", run_id=r.run_id,
                        body={"graph_id": r.graph.graph_id, "nodes": s.nodes, "edges": s.edges, "passages": s.passages,
                              "warnings": r.graph.warnings}), r.dedup_key)
            for r, s in zip(requests, stats)
        ])
        return stats
