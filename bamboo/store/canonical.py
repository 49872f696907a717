"""Canonical names: a new Cause / Resolution / Procedure that means the same as a stored one
takes the stored name, so knowledge accumulates on one node instead of scattering over synonyms.

Graphs written together (a populate group commit) are matched against each other too, in order,
so synonyms inside one group land on one node. Across concurrent writers find-then-write is not
atomic: two of them proposing two new synonyms may both be stored. The unique (kind, name) key
still prevents exact duplicates; near-duplicates created by such a race merge on the next incident
that matches either.

The matching after the nearest-node query runs off the worker's event loop (`bamboo.offload.in_thread`):
it grows with the number of new names in the call, and a populate group of 64 graphs (hundreds of names,
a runbook-sized record alone a thousand) held the loop, and every heartbeat and model call on it, for
0.2-4 s. Each new name is compared with the call's earlier new names of its kind in one matrix product;
only those above the threshold are checked for a contradiction, the one test done name by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bamboo.models.graph import GraphEdge, GraphNode, KnowledgeGraph, NodeRef
from bamboo.models.labels import contradicts
from bamboo.offload import in_thread
from bamboo.store.knowledge import KnowledgeStore

CANONICAL_KINDS = ("Cause", "Resolution", "Procedure")
# Wall time the matching of one call may take off the loop. A full group (64 graphs of a cause, a
# resolution and up to 8 procedures) takes milliseconds this way, a record of 1,000 procedure steps well
# under a second; past the budget the store call fails and its activity is retried, as on a store error.
MATCH_BUDGET_S = 60.0

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
    stored = await store.nearest_nodes(queries, threshold) if queries else []
    return await in_thread(_match, graphs, targets, stored, threshold, budget_s=MATCH_BUDGET_S,
                           what="matching the new names against each other")


def _match(graphs: list[tuple[KnowledgeGraph, list[list[float]]]], targets: list[list[GraphNode]],
           stored_matches: list[str | None], threshold: float) -> list[CanonicalGraph]:
    """The renames of every graph, given each target's stored match (in `targets` order): pure computation,
    run in a thread."""
    matches = iter(stored_matches)
    introduced: dict[str, list[tuple[str, np.ndarray]]] = {}  # kind -> new names of this call, unit vectors
    out = []
    for (graph, vecs), ts in zip(graphs, targets):
        renames: dict[tuple[str, str], NodeRef] = {}
        embeddings: dict[tuple[str, str], list[float]] = {}
        for node, vec in zip(ts, vecs):
            stored = next(matches)
            if stored and contradicts(node.name, stored):
                stored = None  # a name of opposite direction is new knowledge, not a synonym
            unit = _unit(vec)
            earlier = introduced.setdefault(node.kind, [])
            match = stored or _nearest_introduced(earlier, unit, threshold, node.name)
            if match and match != node.name:
                renames[(node.kind, node.name)] = NodeRef(kind=node.kind, name=match)
            elif not match:
                embeddings[(node.kind, node.name)] = vec
                earlier.append((node.name, unit))
            else:
                embeddings[(node.kind, node.name)] = vec
        out.append(_renamed(graph, renames, embeddings))
    return out


def _unit(vec: list[float]) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def _nearest_introduced(candidates: list[tuple[str, np.ndarray]], unit: np.ndarray, threshold: float,
                        name: str) -> str | None:
    """The most similar earlier new name at or above ``threshold`` that ``name`` does not contradict (the first
    on a tie): similarity first, in one product, then the contradiction test on those above the threshold only
    (it tokenises both names, and ran on every earlier name before)."""
    if not candidates:
        return None
    sims = np.stack([vec for _, vec in candidates]) @ unit
    for i in np.argsort(-sims, kind="stable"):
        if sims[i] < threshold:
            return None
        if not contradicts(name, candidates[i][0]):
            return candidates[i][0]
    return None


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
