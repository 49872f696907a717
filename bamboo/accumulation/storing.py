"""Storing extracted graphs: embed, canonicalise, write and audit — for one graph or a group at once.

The per-incident `store_graph` activity stores a group of one; a populate slice stores whatever
incidents finished since its last commit. Grouping pays one embedding call, one nearest-node
query, one transaction and one audit lock per group instead of per incident, which is where a
populate batch spent most of its store cost.

Each graph is stored with its origin (the batch's scope and the incident's file) and its audit row
in the same transaction, keyed by the subject — the scope and the graph — not by the attempt: the
slice that stored an incident, its retry after a crash and the workflow the incident was escalated
to all name the same row, so it is written once. A graph the database refuses is the incident's
own failure: a group the database refuses is written again one graph at a time, so one bad
incident cannot take its group (and with it the slice) down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bamboo.audit import AuditEvent
from bamboo.embeddings.base import Embedder
from bamboo.accumulation.contract import StoreInput
from bamboo.models.graph import GraphWrite, WriteStats
from bamboo.store import Store
from bamboo.store.canonical import canonical_targets, canonicalise_graphs
from bamboo.store.knowledge import DuplicateGraph, GraphOrigin, GraphVectors
from bamboo.store.outage import is_outage

log = logging.getLogger(__name__)


def audit_key(scope: str, graph_id: str) -> str:
    """The subject of a `graph_stored` row: this scope (batch) stored this graph."""
    return f"graph_stored:{scope}:{graph_id}"


@dataclass(frozen=True)
class StoreRequest:
    """A graph to store, the scope storing it (a batch, or a lone workflow) and the incident's file."""

    graph: StoreInput
    run_id: str
    scope: str
    source: str | None = None

    @property
    def dedup_key(self) -> str:
        return audit_key(self.scope, self.graph.graph_id)


@dataclass(frozen=True)
class StoreRefused:
    """The store will not hold this graph; `reason` is for the operator (the incident's failure)."""

    graph_id: str
    reason: str


StoreResult = WriteStats | StoreRefused


class GraphStorer:
    def __init__(self, store: Store, embedder: Embedder, canonical_threshold: float) -> None:
        self.store = store
        self.embedder = embedder
        self.threshold = canonical_threshold

    async def store_many(self, requests: list[StoreRequest]) -> list[StoreResult]:
        """Stats or a refusal per request, in order. An outage is waited out by the store below; a
        group the database refuses for any other reason is retried one graph at a time, so only
        the graphs it refuses alone fail."""
        if not requests:
            return []
        try:
            return await self._store(requests)
        except Exception as exc:
            why = _refusal(exc)
            if not why:  # an outage outlasting the wait, a bug, the embedder: the activity's to retry
                raise
            if len(requests) == 1:
                return [StoreRefused(requests[0].graph.graph_id, why)]
            log.warning("a group of %d graphs was refused (%s: %s); storing them one by one",
                        len(requests), type(exc).__name__, exc)
        out: list[StoreResult] = []
        for request in requests:
            out += await self.store_many([request])
        return out

    async def _store(self, requests: list[StoreRequest]) -> list[StoreResult]:
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
        for request, inp, ps, c, (_, pv) in zip(requests, inputs, passages, canon, per_graph):
            for p in ps:
                if p.node is not None:
                    p.node = c.renames.get(p.node.key(), p.node)
            writes.append(GraphVectors(
                GraphWrite(graph_id=inp.graph_id, incident_id=inp.incident_id, task_id=inp.task_id, graph=c.graph,
                           passages=ps, summary=inp.summary, warnings=inp.warnings),
                pv, c.canonical_embeddings,
                origin=GraphOrigin(request.scope, request.source, inp.content_hash) if request.source else None,
                audit=_audit_row(request), human_requests=list(inp.human_requests)))
        results = await self.store.knowledge.write_graphs(writes)
        return [StoreRefused(r.graph_id, r.reason()) if isinstance(r, DuplicateGraph) else r for r in results]


def _audit_row(request: StoreRequest):
    def row(stats: WriteStats) -> tuple[AuditEvent, str]:
        body = {"graph_id": request.graph.graph_id, "nodes": stats.nodes, "edges": stats.edges,
                "passages": stats.passages, "warnings": request.graph.warnings}
        if request.source:
            body["source"] = request.source
        return AuditEvent(kind="graph_stored", actor="accumulate", run_id=request.run_id, body=body), request.dedup_key
    return row


def _refusal(exc: BaseException) -> str:
    """Why the database refused a graph, for the incident's failure ("" when it is not a refusal)."""
    import psycopg

    if isinstance(exc, (psycopg.DataError, psycopg.IntegrityError)) or (
            isinstance(exc, psycopg.Error) and not is_outage(exc) and not isinstance(exc, psycopg.ProgrammingError)):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"the store refused this incident ({type(exc).__name__}: {first[:200]}); fix the value it names"
    if isinstance(exc, (UnicodeEncodeError, ValueError)):
        return f"the store cannot hold this incident ({type(exc).__name__}: {str(exc)[:200]})"
    return ""
