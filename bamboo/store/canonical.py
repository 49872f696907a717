"""Canonical names: a new Cause / Resolution / Procedure that means the same as a stored one
takes the stored name, so knowledge accumulates on one node instead of scattering over synonyms.

Graphs written together (a populate group commit) are matched against each other too, in order,
so synonyms inside one group land on one node. Across concurrent writers find-then-write is not
atomic: two of them proposing two new synonyms may both be stored. The unique (kind, name) key
still prevents exact duplicates; near-duplicates created by such a race merge on the next incident
that matches either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bamboo.models.graph import GraphEdge, GraphNode, KnowledgeGraph, NodeRef
from bamboo.models.labels import contradicts
from bamboo.store.knowledge import KnowledgeStore

CANONICAL_KINDS = ("Cause", "Resolution", "Procedure")

@dataclass
class CanonicalGraph:
    graph: KnowledgeGraph
    renames: dict[tuple[str, str], NodeRef] = field(default_factory=dict)
    canonical_embeddings: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def canonical_targets(graph: KnowledgeGraph) -> list[GraphNode]:
    """The nodes whose names are matched against stored ones (their names must be embedded)."""
    return [n for n in graph.nodes if n.kind in CANONICAL_KINDS]


async def canonicalise_graph(graph: KnowledgeGraph, store: KnowledgeStore, vectors: list[list[float]],
                             threshold: float) -> CanonicalGraph:
    """`vectors` are the embeddings of `canonical_targets(graph)` names, in that order."""
    return (await canonicalise_graphs([(graph, vectors)], store, threshold))[0]


async def canonicalise_graphs(graphs: list[tuple[KnowledgeGraph, list[list[float]]]], store: KnowledgeStore,
                              threshold: float) -> list[CanonicalGraph]:
    """Each graph with the embeddings of its `canonical_targets` names; one nearest-node query for all.

    A target with no stored match above `threshold` may still match a new name introduced by an
    earlier graph of the same call, which then becomes its canonical name."""
    targets = [canonical_targets(graph) for graph, _ in graphs]
    queries = [(n.kind, v) for ts, (_, vecs) in zip(targets, graphs) for n, v in zip(ts, vecs)]
    matches = iter(await store.nearest_nodes(queries, threshold) if queries else [])
    introduced: dict[str, list[tuple[str, np.ndarray]]] = {}  # kind -> new names of this call with unit vectors
    out = []
    for (graph, vecs), ts in zip(graphs, targets):
        renames: dict[tuple[str, str], NodeRef] = {}
        embeddings: dict[tuple[str, str], list[float]] = {}
        for node, vec in zip(ts, vecs):
            stored = next(matches)
            if stored and contradicts(node.name, stored):
                stored = None  # a name of opposite direction is new knowledge, not a synonym
            match = stored or _nearest_introduced(introduced.get(node.kind, []), vec, threshold, node.name)
            if match and match != node.name:
                renames[(node.kind, node.name)] = NodeRef(kind=node.kind, name=match)
            elif not match:
                embeddings[(node.kind, node.name)] = vec
                introduced.setdefault(node.kind, []).append((node.name, _unit(vec)))
            else:
                embeddings[(node.kind, node.name)] = vec
        out.append(_renamed(graph, renames, embeddings))
    return out


def _unit(vec: list[float]) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def _nearest_introduced(candidates: list[tuple[str, np.ndarray]], vec: list[float], threshold: float,
                        name: str) -> str | None:
    candidates = [c for c in candidates if not contradicts(name, c[0])]
    if not candidates:
        return None
    sims = np.stack([c for _, c in candidates]) @ _unit(vec)
    best = int(np.argmax(sims))
    return candidates[best][0] if float(sims[best]) >= threshold else None


def _renamed(graph: KnowledgeGraph, renames: dict[tuple[str, str], NodeRef],
             embeddings: dict[tuple[str, str], list[float]]) -> CanonicalGraph:
    if not renames:
        return CanonicalGraph(graph=graph, canonical_embeddings=embeddings)

    def ref(r: NodeRef) -> NodeRef:
        return renames.get(r.key(), r)

    out = KnowledgeGraph()
    for n in graph.nodes:
        new = renames.get((n.kind, n.name))
        out.add_node(GraphNode(kind=n.kind, name=new.name, description=n.description,
                               props={**n.props, "alias": n.name}) if new else n)
    for e in graph.edges:
        if ref(e.src) != ref(e.dst):
            out.add_edge(GraphEdge(src=ref(e.src), kind=e.kind, dst=ref(e.dst), confidence=e.confidence, params=e.params))
    return CanonicalGraph(graph=out, renames=renames, canonical_embeddings=embeddings)
