"""Canonical names: a new Cause / Resolution / Procedure that means the same as a stored one
takes the stored name, so knowledge accumulates on one node instead of scattering over synonyms.

Find-then-write is not atomic: two concurrent incidents proposing two new synonyms may both be
stored. The unique (kind, name) key still prevents exact duplicates; near-duplicates created by
such a race merge on the next incident that matches either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bamboo.models.graph import GraphEdge, GraphNode, KnowledgeGraph, NodeRef
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
    targets = canonical_targets(graph)
    if not targets:
        return CanonicalGraph(graph=graph)
    matches = await store.nearest_nodes([(n.kind, v) for n, v in zip(targets, vectors)], threshold)
    renames: dict[tuple[str, str], NodeRef] = {}
    embeddings: dict[tuple[str, str], list[float]] = {}
    for node, vec, match in zip(targets, vectors, matches):
        if match and match != node.name:
            renames[(node.kind, node.name)] = NodeRef(kind=node.kind, name=match)
        else:
            embeddings[(node.kind, node.name)] = vec
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
