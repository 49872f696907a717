"""A graph write that dies between its two transactions leaves nodes and edges no stored incident supports
(). Analysis and canonical matching must read them as if they were not there: the symptom is
still a novel lead, the never-stored cause is no candidate, and a later incident is not renamed after it."""

from __future__ import annotations

import pytest

from bamboo.analysis import queries
from bamboo.analysis.contract import Clue
from bamboo.analysis.ranking import novel_leads
from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph, NodeRef
from bamboo.store.knowledge import GraphOrigin, GraphVectors, KnowledgeStore


def _axis(dim: int, i: int) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


def _ref(kind: str, name: str) -> NodeRef:
    return NodeRef(kind=kind, name=name)


def _graph(nodes: list[GraphNode], edges: list[tuple[tuple[str, str], str, tuple[str, str]]]) -> KnowledgeGraph:
    g = KnowledgeGraph()
    for n in nodes:
        g.add_node(n)
    for src, kind, dst in edges:
        g.add_edge(GraphEdge(src=_ref(*src), kind=kind, dst=_ref(*dst)))
    return g


STORED_SYMPTOM = ("Symptom", "StoredSymptom")
STORED_CAUSE = ("Cause", "Stored cause")
STORED_FIX = ("Resolution", "Stored fix")
LONE_SYMPTOM = ("Symptom", "LoneSymptom")
ORPHAN_SYMPTOM = ("Symptom", "NeverStoredSymptom")
ORPHAN_CAUSE = ("Cause", "A cause of a graph never stored")
ORPHAN_FIX = ("Resolution", "A fix never stored")
ORPHAN_STEP = ("Procedure", "A step never stored")


async def _half_write(store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch, dim: int) -> None:
    """Writes a graph whose second transaction fails, as a worker killed between the two would."""
    graph = _graph(
        [GraphNode(kind=k, name=n) for k, n in (ORPHAN_SYMPTOM, ORPHAN_CAUSE, ORPHAN_FIX, ORPHAN_STEP, STORED_CAUSE)],
        [(ORPHAN_SYMPTOM, "indicate", ORPHAN_CAUSE), (ORPHAN_SYMPTOM, "indicate", STORED_CAUSE),
         (STORED_CAUSE, "solved_by", ORPHAN_FIX), (STORED_CAUSE, "investigated_by", ORPHAN_STEP),
         (ORPHAN_CAUSE, "solved_by", ORPHAN_FIX)])
    item = GraphVectors(GraphWrite(graph_id="panda:2:broken", incident_id="i2", task_id=2, graph=graph, summary="s"),
                        [], {ORPHAN_CAUSE: _axis(dim, 7), ORPHAN_FIX: _axis(dim, 8)},
                        origin=GraphOrigin("populate:b:run", "/data/inc-2.json"))

    async def killed(*args, **kwargs):
        raise RuntimeError("worker killed between the two transactions")

    with monkeypatch.context() as m:
        m.setattr(KnowledgeStore, "_write_passages", staticmethod(killed))
        with pytest.raises(RuntimeError, match="killed"):
            await store.write_graphs([item])


async def _seed(services, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored incident (symptom -> cause -> fix), a stored incident naming only a symptom, and a half-write."""
    store, pool, dim = services.store.knowledge, services.store.pool, services.embedder.dim
    stored = _graph([GraphNode(kind=k, name=n) for k, n in (STORED_SYMPTOM, STORED_CAUSE, STORED_FIX)],
                    [(STORED_SYMPTOM, "indicate", STORED_CAUSE), (STORED_CAUSE, "solved_by", STORED_FIX)])
    await store.write_graph(GraphWrite(graph_id="panda:1:broken", incident_id="i1", task_id=1, graph=stored), [],
                            {STORED_CAUSE: _axis(dim, 3), STORED_FIX: _axis(dim, 4)})
    lone = _graph([GraphNode(kind=k, name=n) for k, n in (LONE_SYMPTOM,)], [])
    await store.write_graph(GraphWrite(graph_id="panda:3:broken", incident_id="i3", task_id=3, graph=lone), [])
    await _half_write(store, monkeypatch, dim)

    # The half-write really left its rows: nodes, and edges of frequency 0 with no provenance and no graph.
    counts = await store.row_counts()
    assert counts["graphs"] == 2 and counts["nodes"] == 8 and counts["edge_provenance"] == 2
    async with pool.connection() as conn:
        unsupported = (await (await conn.execute("SELECT count(*) FROM edges WHERE frequency = 0")).fetchone())[0]
    assert unsupported == 5


SYMPTOMS = [Clue(type="symptom", kind="Symptom", name=n, text="x")
            for n in (ORPHAN_SYMPTOM[1], STORED_SYMPTOM[1], LONE_SYMPTOM[1])]


async def test_a_symptom_only_a_half_write_names_stays_a_novel_lead(services, monkeypatch):
    await _seed(services, monkeypatch)
    known = await queries.known_symptoms(services.store.pool, [c.name for c in SYMPTOMS])
    assert known == {STORED_SYMPTOM[1]: 1, LONE_SYMPTOM[1]: 0}
    assert [(lead.symptom, lead.reason) for lead in novel_leads(SYMPTOMS, known)] == [
        (ORPHAN_SYMPTOM[1], "symptom never seen before"), (LONE_SYMPTOM[1], "symptom seen, but no cause recorded")]


async def test_edges_no_stored_incident_supports_are_no_evidence(services, monkeypatch):
    await _seed(services, monkeypatch)
    pool = services.store.pool
    edges = await queries.clue_edges(pool, SYMPTOMS)
    assert [(e.clue_name, e.cause, e.frequency, e.clue_total) for e in edges] == [
        (STORED_SYMPTOM[1], STORED_CAUSE[1], 1, 1)]
    fixes = await queries.resolutions(pool, [STORED_CAUSE[1]])
    assert fixes.texts == {STORED_CAUSE[1]: [STORED_FIX[1]]}
    assert await queries.procedures_for_cause(pool, STORED_CAUSE[1]) == []


async def test_canonical_matching_ignores_nodes_no_stored_graph_names(services, monkeypatch):
    await _seed(services, monkeypatch)
    dim = services.embedder.dim
    # The orphan cause's and fix's embeddings name nothing; the stored cause's still matches.
    assert await services.store.knowledge.nearest_nodes(
        [("Cause", _axis(dim, 7)), ("Resolution", _axis(dim, 8)), ("Cause", _axis(dim, 3))], 0.9,
    ) == [None, None, STORED_CAUSE[1]]
