"""A new Cause that means the same as a stored one takes the stored name; edges follow the rename."""


from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph
from bamboo.store.canonical import canonical_targets, canonicalise_graph


def _graph(cause: str) -> KnowledgeGraph:
    g = KnowledgeGraph()
    s = g.add_node(GraphNode(kind="Symptom", name="InsufficientMemory"))
    c = g.add_node(GraphNode(kind="Cause", name=cause))
    g.add_edge(GraphEdge(src=s, kind="indicate", dst=c))
    return g


async def test_synonym_cause_merges_onto_stored_node(services):
    store = services.store.knowledge
    v = [1.0] + [0.0] * 383
    first = _graph("Insufficient memory request")
    await store.write_graph(GraphWrite(graph_id="g1", incident_id="1", graph=first), [],
                            {("Cause", "Insufficient memory request"): v})
    second = _graph("Memory request too low")
    near = [0.99, 0.1] + [0.0] * 382
    targets = canonical_targets(second)
    assert [t.name for t in targets] == ["Memory request too low"]
    result = await canonicalise_graph(second, store, [near], threshold=0.9)
    assert [n.name for n in result.graph.of_kind("Cause")] == ["Insufficient memory request"]
    assert result.graph.edges[0].dst.name == "Insufficient memory request"
    far = [0.0, 1.0] + [0.0] * 382
    kept = await canonicalise_graph(_graph("Expired proxy"), store, [far], threshold=0.9)
    assert [n.name for n in kept.graph.of_kind("Cause")] == ["Expired proxy"]
    assert ("Cause", "Expired proxy") in kept.canonical_embeddings


async def test_a_name_of_opposite_direction_is_never_merged_however_close(services):
    """'stage-out' and 'stage-in' embed at 0.937 and were merged; a direction or negation word swapped
    makes new knowledge, not a synonym."""
    store = services.store.knowledge
    v = [0.0, 0.0, 1.0] + [0.0] * 381
    await store.write_graph(GraphWrite(graph_id="g-dir", incident_id="dir", graph=_graph("Stage-in failures at the site")),
                            [], {("Cause", "Stage-in failures at the site"): v})
    near = [0.0, 0.05, 0.999] + [0.0] * 381
    out = await canonicalise_graph(_graph("Stage-out failures at the site"), store, [near], threshold=0.9)
    assert [n.name for n in out.graph.of_kind("Cause")] == ["Stage-out failures at the site"]
    same = await canonicalise_graph(_graph("Stage-in failure at the site"), store, [near], threshold=0.9)
    assert [n.name for n in same.graph.of_kind("Cause")] == ["Stage-in failures at the site"]


def test_contradicting_names():
    from bamboo.models.labels import contradicts

    assert contradicts("Group stage-out failures by site", "Group stage-in failures by site")
    assert contradicts("Site in downtime", "Site not in downtime")
    assert not contradicts("Task ran out of memory", "Insufficient memory for the payload")
    assert not contradicts("Increase ramCount", "Raise ramCount")
