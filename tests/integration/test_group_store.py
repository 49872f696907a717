"""Group writes: many graphs per transaction, canonicalised together, audited under one lock.

A populate slice commits whatever incidents finished since its last commit as one group. The group
path is only safe if it is indistinguishable from storing the incidents one after the other, so
these tests compare it against the one-by-one path on real Postgres, row by row.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest

from bamboo.accumulation.storing import GraphStorer, StoreRequest
from bamboo.audit import AuditEvent
from bamboo.accumulation.contract import StoreInput
from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph, NodeRef, PassageDraft
from bamboo.store import Store, open_store
from bamboo.store.canonical import canonical_targets, canonicalise_graphs
from bamboo.store.knowledge import GraphVectors

DIM = 384


# ---------------------------------------------------------------------------------------- helpers
def _basis(i: int) -> list[float]:
    """A unit vector along axis `i`: distinct axes are orthogonal (cosine 0)."""
    v = [0.0] * DIM
    v[i] = 1.0
    return v


def _angle(degrees: float, axis_a: int = 0, axis_b: int = 1) -> list[float]:
    """A unit vector in the (axis_a, axis_b) plane: the cosine of two of them is cos(angle difference)."""
    v = [0.0] * DIM
    v[axis_a] = math.cos(math.radians(degrees))
    v[axis_b] = math.sin(math.radians(degrees))
    return v


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _ref(kind: str, name: str) -> NodeRef:
    return NodeRef(kind=kind, name=name)


def _edge(src: tuple[str, str], kind: str, dst: tuple[str, str], confidence: float = 1.0) -> GraphEdge:
    return GraphEdge(src=_ref(*src), kind=kind, dst=_ref(*dst), confidence=confidence)


def _graph(nodes: list[GraphNode], edges: list[GraphEdge]) -> KnowledgeGraph:
    g = KnowledgeGraph()
    for n in nodes:
        g.add_node(n)
    for e in edges:
        g.add_edge(e)
    return g


def _item(graph_id: str, graph: KnowledgeGraph, passages: list[tuple[PassageDraft, list[float]]],
          canonical: dict[tuple[str, str], list[float]] | None = None, summary: str = "",
          warnings: list[str] | None = None) -> GraphVectors:
    write = GraphWrite(graph_id=graph_id, incident_id=f"inc-{graph_id}", task_id=abs(hash(graph_id)) % 10_000,
                       graph=graph, passages=[p for p, _ in passages], summary=summary or f"summary of {graph_id}",
                       warnings=warnings or [])
    return GraphVectors(write, [v for _, v in passages], canonical or {})


OOM = ("Symptom", "Out of memory")
SLOW = ("Symptom", "Slow staging")
BIG_INPUT = ("Task_Feature", "Large input dataset")
MANY_JOBS = ("Task_Feature", "Many jobs")
MEM = ("Cause", "Insufficient memory request")
DISK = ("Cause", "Scratch disk full")
RAISE = ("Resolution", "Raise memory request")


def _three_graphs() -> list[GraphVectors]:
    """Three incidents sharing Symptom/Task_Feature/Cause nodes and the edge OOM -indicate-> MEM.

    The shared nodes carry different descriptions and props in different graphs, so the
    first-writer-wins merge rules are exercised too."""
    g1 = _item("g1", _graph(
        [GraphNode(kind="Symptom", name=OOM[1]),  # empty description: a later graph's one fills it
         GraphNode(kind="Cause", name=MEM[1], description="memory request too small", props={"src": "g1"}),
         GraphNode(kind="Task_Feature", name=BIG_INPUT[1], props={"size": "large"}),
         GraphNode(kind="Resolution", name=RAISE[1], description="raise it")],
        [_edge(OOM, "indicate", MEM, 0.4), _edge(BIG_INPUT, "contribute_to", MEM, 0.9),
         _edge(MEM, "solved_by", RAISE, 1.0)]),
        [(PassageDraft(section="summary", key="s", content="g1 ran out of memory"), _basis(10)),
         (PassageDraft(section="cause", key="c", content="memory request too small", node=_ref(*MEM)), _basis(11))],
        canonical={MEM: _basis(100), RAISE: _basis(101)}, warnings=["w1"])
    g2 = _item("g2", _graph(
        [GraphNode(kind="Symptom", name=OOM[1], description="the job was OOM-killed", props={"signal": 9}),
         GraphNode(kind="Cause", name=MEM[1], description="second description loses",
                   props={"src": "g2", "extra": True}),
         GraphNode(kind="Cause", name=DISK[1], description="scratch full"),
         GraphNode(kind="Symptom", name=SLOW[1])],
        [_edge(OOM, "indicate", MEM, 0.8), _edge(SLOW, "indicate", DISK, 0.7)]),
        [(PassageDraft(section="summary", key="s", content="g2 OOM and slow staging"), _basis(12)),
         (PassageDraft(section="symptom", key="oom", content="OOM-killed", node=_ref(*OOM)), _basis(13))],
        canonical={MEM: _basis(102), DISK: _basis(103)})  # MEM's first embedding (g1's) must be kept
    g3 = _item("g3", _graph(
        [GraphNode(kind="Task_Feature", name=BIG_INPUT[1], props={"size": "huge", "files": 3}),
         GraphNode(kind="Task_Feature", name=MANY_JOBS[1]),
         GraphNode(kind="Symptom", name=OOM[1], description="third description loses"),
         GraphNode(kind="Cause", name=DISK[1])],
        [_edge(BIG_INPUT, "associated_with", OOM, 0.5), _edge(MANY_JOBS, "contribute_to", DISK, 0.6)]),
        [(PassageDraft(section="summary", key="s", content="g3 many jobs filled the disk"), _basis(14))],
        canonical={DISK: _basis(104)})
    return [g1, g2, g3]


async def _snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row that matters, keyed by names rather than serial ids (which differ between databases)."""
    queries = {
        "graphs": "SELECT graph_id, incident_id, task_id, summary, warnings::text FROM graphs ORDER BY graph_id",
        "nodes": "SELECT kind, name, description, props::text, embedding::text FROM nodes ORDER BY kind, name",
        "edges": "SELECT s.kind, s.name, e.kind, d.kind, d.name, e.frequency, round(e.confidence::numeric, 4) "
                 "FROM edges e JOIN nodes s ON s.id = e.src JOIN nodes d ON d.id = e.dst "
                 "ORDER BY 1, 2, 3, 4, 5",
        "edge_provenance": "SELECT s.kind, s.name, e.kind, d.kind, d.name, p.graph_id, "
                           "round(p.confidence::numeric, 4), p.params::text FROM edge_provenance p "
                           "JOIN edges e ON e.id = p.edge_id JOIN nodes s ON s.id = e.src JOIN nodes d ON d.id = e.dst "
                           "ORDER BY 1, 2, 3, 4, 5, 6",
        "passages": "SELECT p.id, p.graph_id, p.section, p.content, n.kind, n.name, p.meta::text, p.embedding::text "
                    "FROM passages p LEFT JOIN nodes n ON n.id = p.node_id ORDER BY p.id",
    }
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with store.pool.connection() as conn:
        for table, sql in queries.items():
            out[table] = [tuple(r) for r in await (await conn.execute(sql)).fetchall()]
    return out


async def _scalar(store: Store, sql: str, params: tuple = ()) -> Any:
    async with store.pool.connection() as conn:
        return (await (await conn.execute(sql, params)).fetchone())[0]


@contextlib.asynccontextmanager
async def _second_store(stack, services):
    """A store on a fresh database of the same Postgres, opened the way `build_services` opens one."""
    store = await open_store(stack.new_database(), services.embedder.dim, services.embedder.model_id, max_size=2)
    try:
        yield store
    finally:
        await store.close()


class CountingEmbedder:
    """The services' embedder, counting how many embedding calls (round trips) go through it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.model_id = inner.model_id
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await self.inner.embed(texts)


def _store_input(graph_id: str, cause: str, symptom: str) -> StoreInput:
    g = _graph([GraphNode(kind="Symptom", name=symptom), GraphNode(kind="Cause", name=cause),
                GraphNode(kind="Resolution", name=f"fix for {cause}")],
               [_edge(("Symptom", symptom), "indicate", ("Cause", cause)),
                _edge(("Cause", cause), "solved_by", ("Resolution", f"fix for {cause}"))])
    return StoreInput(
        graph_id=graph_id, incident_id=f"inc-{graph_id}", task_id=None, graph=g, summary=f"{graph_id} summary",
        passages=[PassageDraft(section="summary", key="s", content=f"{graph_id}: {symptom} because {cause}"),
                  PassageDraft(section="cause", key="c", content=cause, node=_ref("Cause", cause)),
                  PassageDraft(section="empty", key="e", content="   ")],  # blank: neither embedded nor stored
        warnings=[f"warning of {graph_id}"], human_requests=[f"confirm {cause}"],
    )


# ------------------------------------------------------------------------------------------ tests
async def test_group_write_equals_one_by_one_writes(services, stack):
    """The core contract of `write_graphs`: one set-based transaction leaves exactly the rows that
    writing the graphs one after the other leaves — node merges (first description, first prop
    value, first embedding), shared-edge frequency/confidence, provenance, passages, graph rows."""
    grouped = services.store
    grouped_stats = await grouped.knowledge.write_graphs(_three_graphs())
    async with _second_store(stack, services) as sequential:
        sequential_stats = [await sequential.knowledge.write_graph(i.write, i.embeddings, i.canonical_embeddings)
                            for i in _three_graphs()]
        expected = await _snapshot(sequential)
    got = await _snapshot(grouped)

    assert grouped_stats == sequential_stats
    assert [s.graph_id for s in grouped_stats] == ["g1", "g2", "g3"]
    for table in expected:
        assert got[table] == expected[table], table
    # Guard against a vacuous comparison: the fixture really shares rows between graphs.
    shared = [r for r in got["edges"] if (r[0], r[1], r[2], r[3], r[4]) == (*OOM, "indicate", *MEM)]
    assert shared and shared[0][5] == 2 and float(shared[0][6]) == pytest.approx(0.6)
    oom = next(r for r in got["nodes"] if (r[0], r[1]) == OOM)
    assert oom[2] == "the job was OOM-killed"
    assert len(got["passages"]) == 5 and len(got["graphs"]) == 3


async def test_rewriting_the_same_group_is_idempotent(services):
    """Temporal retries a store activity after a timeout even when the first attempt committed: a
    second identical group write must change no row count and report the same stats."""
    store = services.store
    first = await store.knowledge.write_graphs(_three_graphs())
    counts = await store.knowledge.row_counts()
    before = await _snapshot(store)
    second = await store.knowledge.write_graphs(_three_graphs())
    assert second == first
    assert await store.knowledge.row_counts() == counts
    assert await _snapshot(store) == before
    assert counts["graphs"] == 3 and counts["edge_provenance"] == 7 and counts["passages"] == 5


async def test_repeated_graph_id_in_one_group_last_write_wins(services):
    """One group may hold two versions of an incident (stored, then re-stored after a retry): the
    later one's edges and passages replace the earlier one's, and stats still line up with inputs."""
    store = services.store
    first = _item("g1", _graph(
        [GraphNode(kind="Symptom", name=OOM[1]), GraphNode(kind="Cause", name=MEM[1])],
        [_edge(OOM, "indicate", MEM, 0.3)]),
        [(PassageDraft(section="summary", key="old", content="first version"), _basis(20)),
         (PassageDraft(section="cause", key="c", content="first cause text"), _basis(21))],
        summary="first summary")
    other = _item("g2", _graph(
        [GraphNode(kind="Symptom", name=SLOW[1]), GraphNode(kind="Cause", name=DISK[1])],
        [_edge(SLOW, "indicate", DISK, 0.7)]),
        [(PassageDraft(section="summary", key="s", content="other graph"), _basis(22))])
    last = _item("g1", _graph(
        [GraphNode(kind="Symptom", name=SLOW[1]), GraphNode(kind="Cause", name=DISK[1]),
         GraphNode(kind="Resolution", name=RAISE[1])],
        [_edge(SLOW, "indicate", DISK, 0.9), _edge(DISK, "solved_by", RAISE, 0.5)]),
        [(PassageDraft(section="cause", key="c", content="last cause text"), _basis(23))],
        summary="last summary")

    stats = await store.knowledge.write_graphs([first, other, last])

    assert [s.graph_id for s in stats] == ["g1", "g2", "g1"]
    assert stats[2].model_dump() == {"graph_id": "g1", "nodes": 3, "edges": 2, "passages": 1}
    assert stats[1].model_dump() == {"graph_id": "g2", "nodes": 2, "edges": 1, "passages": 1}
    assert await store.knowledge.edges_for_graph("g1") == {
        (*SLOW, "indicate", *DISK), (*DISK, "solved_by", *RAISE)}
    snap = await _snapshot(store)
    assert [(r[1], r[2], r[3]) for r in snap["passages"] if r[1] == "g1"] == [("g1", "cause", "last cause text")]
    assert [r for r in snap["graphs"] if r[0] == "g1"][0][3] == "last summary"
    # The first version's only edge has no provenance left, so it is gone; the shared one counts g1 and g2.
    edges = {(r[0], r[1], r[2], r[3], r[4]): (r[5], float(r[6])) for r in snap["edges"]}
    assert (*OOM, "indicate", *MEM) not in edges
    assert edges[(*SLOW, "indicate", *DISK)] == (2, pytest.approx(0.8))


async def test_repeated_graph_id_matches_one_by_one_writes(services, stack):
    """The docstring promises equivalence with sequential writes *including* repeated ids. Node rows
    are not owned by a graph: a re-write replaces provenance and passages but not the nodes (or the
    description/props/embedding) the first version introduced."""
    def items() -> list[GraphVectors]:
        first = _item("g1", _graph(
            [GraphNode(kind="Symptom", name=OOM[1], description="from the first version"),
             GraphNode(kind="Cause", name=MEM[1])],
            [_edge(OOM, "indicate", MEM, 0.3)]),
            [(PassageDraft(section="summary", key="s", content="first"), _basis(30))],
            canonical={MEM: _basis(130)})
        last = _item("g1", _graph(
            [GraphNode(kind="Symptom", name=OOM[1], description="from the last version"),
             GraphNode(kind="Cause", name=DISK[1])],
            [_edge(OOM, "indicate", DISK, 0.9)]),
            [(PassageDraft(section="summary", key="s", content="last"), _basis(31))],
            canonical={DISK: _basis(131)})
        return [first, last]

    await services.store.knowledge.write_graphs(items())
    async with _second_store(stack, services) as sequential:
        for i in items():
            await sequential.knowledge.write_graph(i.write, i.embeddings, i.canonical_embeddings)
        expected = await _snapshot(sequential)
    got = await _snapshot(services.store)
    for table in ("graphs", "edges", "edge_provenance", "passages"):
        assert got[table] == expected[table], table
    assert got["nodes"] == expected["nodes"]


async def test_rewrite_with_fewer_edges_drops_provenance_and_orphans(services):
    """A re-extracted incident that no longer claims an edge must stop counting towards it: its
    provenance row goes, a shared edge's frequency/confidence drop to the others', and an edge no
    graph claims any more is deleted rather than left behind with frequency 0."""
    store = services.store
    g1, g2, g3 = _three_graphs()
    await store.knowledge.write_graphs([g1, g2, g3])
    before = {(r[0], r[1], r[2], r[3], r[4]): (r[5], float(r[6])) for r in (await _snapshot(store))["edges"]}
    assert before[(*OOM, "indicate", *MEM)] == (2, pytest.approx(0.6))
    assert (*BIG_INPUT, "contribute_to", *MEM) in before

    # g1 again without the shared OOM->MEM edge and without its own BIG_INPUT->MEM edge.
    slim = _item("g1", _graph(
        [n.model_copy(deep=True) for n in g1.write.graph.nodes],
        [e for e in g1.write.graph.edges if e.kind == "solved_by"]),
        list(zip(g1.write.passages, g1.embeddings)), canonical=g1.canonical_embeddings, warnings=["w1"])
    stats = await store.knowledge.write_graphs([slim])
    assert stats[0].model_dump() == {"graph_id": "g1", "nodes": 4, "edges": 1, "passages": 2}

    snap = await _snapshot(store)
    after = {(r[0], r[1], r[2], r[3], r[4]): (r[5], float(r[6])) for r in snap["edges"]}
    assert after[(*OOM, "indicate", *MEM)] == (1, pytest.approx(0.8))  # only g2's claim is left
    assert (*BIG_INPUT, "contribute_to", *MEM) not in after  # orphaned: deleted
    assert set(after) == set(before) - {(*BIG_INPUT, "contribute_to", *MEM)}
    assert await store.knowledge.edges_for_graph("g1") == {(*MEM, "solved_by", *RAISE)}
    assert await store.knowledge.edges_for_graph("g2") == {(*OOM, "indicate", *MEM), (*SLOW, "indicate", *DISK)}
    assert await _scalar(store, "SELECT count(*) FROM edges WHERE frequency < 1") == 0

    # The single-graph entry point goes through the same path: drop the last g1 edge too.
    await store.knowledge.write_graph(
        GraphWrite(graph_id="g1", incident_id="inc-g1", graph=_graph(list(slim.write.graph.nodes), []),
                   passages=slim.write.passages), slim.embeddings)
    assert await store.knowledge.edges_for_graph("g1") == set()
    assert await _scalar(store, "SELECT count(*) FROM edge_provenance WHERE graph_id = 'g1'") == 0
    assert await _scalar(store, "SELECT count(*) FROM edges e JOIN nodes s ON s.id = e.src "
                                "WHERE e.kind = 'solved_by' AND s.name = %s", (MEM[1],)) == 0


async def test_canonicalise_group_merges_in_call_synonyms(services):
    """Synonyms proposed by two incidents of the same group must land on one node, or grouping
    would scatter knowledge that one-by-one storing would have merged (nothing is stored yet, so
    only the in-call match can catch it). A far name stays its own node."""
    store = services.store.knowledge
    near_a, near_b, far = _angle(0), _angle(8), _basis(5)  # cos(a, b) = cos 8° ≈ 0.990
    assert _cosine(near_a, near_b) == pytest.approx(0.990, abs=1e-3)

    def graph(symptom: str, cause: str) -> KnowledgeGraph:
        return _graph([GraphNode(kind="Symptom", name=symptom), GraphNode(kind="Cause", name=cause)],
                      [_edge(("Symptom", symptom), "indicate", ("Cause", cause))])

    first = graph("Out of memory", "Insufficient memory request")
    second = graph("Killed by OOM", "Memory request too low")
    third = graph("Stage-in failed", "Expired proxy")
    assert [n.name for n in canonical_targets(second)] == ["Memory request too low"]

    out = await canonicalise_graphs([(first, [near_a]), (second, [near_b]), (third, [far])], store, 0.95)

    assert out[0].renames == {} and out[0].canonical_embeddings == {("Cause", "Insufficient memory request"): near_a}
    assert out[1].renames == {("Cause", "Memory request too low"): _ref("Cause", "Insufficient memory request")}
    [cause] = out[1].graph.of_kind("Cause")
    assert cause.name == "Insufficient memory request" and cause.props["alias"] == "Memory request too low"
    assert [(e.src.name, e.dst.name) for e in out[1].graph.edges] == [("Killed by OOM", "Insufficient memory request")]
    assert ("Cause", "Memory request too low") not in out[1].canonical_embeddings
    assert out[2].renames == {} and out[2].canonical_embeddings == {("Cause", "Expired proxy"): far}

    # Written as a group, the synonyms share one Cause node with both incidents' provenance.
    await store.write_graphs([
        GraphVectors(GraphWrite(graph_id=f"c{i}", incident_id=str(i), graph=c.graph), [], c.canonical_embeddings)
        for i, c in enumerate(out)])
    causes = dict((r[1], r[3]) for r in (await _snapshot(services.store))["nodes"] if r[0] == "Cause")
    assert set(causes) == {"Insufficient memory request", "Expired proxy"}
    assert '"alias": "Memory request too low"' in causes["Insufficient memory request"]
    edges = {(r[1], r[4]): r[5] for r in (await _snapshot(services.store))["edges"]}
    assert edges == {("Out of memory", "Insufficient memory request"): 1,
                     ("Killed by OOM", "Insufficient memory request"): 1, ("Stage-in failed", "Expired proxy"): 1}


async def test_canonicalise_group_prefers_stored_match_over_in_call(services):
    """A stored canonical name wins over a new one from the same call even when the new one is
    closer: the stored node already carries accumulated knowledge, a name from this group does not."""
    store = services.store.knowledge
    stored, new, proposal = _angle(0), _angle(30), _angle(20)
    # `new` does not match the stored node; `proposal` matches both, and the in-call name more closely.
    assert _cosine(new, stored) < 0.9 <= _cosine(proposal, stored) < _cosine(proposal, new)
    await store.write_graph(
        GraphWrite(graph_id="s", incident_id="s", graph=_graph([GraphNode(kind="Cause", name="Stored cause")], [])),
        [], {("Cause", "Stored cause"): stored})

    def graph(cause: str) -> KnowledgeGraph:
        return _graph([GraphNode(kind="Symptom", name="Out of memory"), GraphNode(kind="Cause", name=cause)],
                      [_edge(OOM, "indicate", ("Cause", cause))])

    out = await canonicalise_graphs([(graph("New cause"), [new]), (graph("Proposed cause"), [proposal])], store, 0.9)
    assert out[0].renames == {} and ("Cause", "New cause") in out[0].canonical_embeddings
    assert out[1].renames == {("Cause", "Proposed cause"): _ref("Cause", "Stored cause")}
    assert out[1].graph.edges[0].dst == _ref("Cause", "Stored cause")


async def test_audit_append_many_dedups_and_keeps_the_chain(services):
    """A retried group must not duplicate audit rows — neither against earlier calls nor inside one
    call — and the hash chain written in bulk must verify and keep chaining for single appends."""
    audit = services.store.audit

    def ev(n: int) -> AuditEvent:
        return AuditEvent(kind="test_event", actor="tests", run_id=f"run-{n}", body={"n": n, "nested": {"x": [n]}})

    assert await audit.append_many([]) == []
    assert await audit.append_many([(ev(1), "a"), (ev(2), "b"), (ev(3), "a")]) == [1, 2, None]
    assert await audit.append_many([(ev(4), "b"), (ev(5), "c")]) == [None, 3]
    report = await audit.verify()
    assert report.ok and report.rows == 3, report
    rows = await audit.tail(10)
    assert [(r["seq"], r["body"]["n"]) for r in rows] == [(3, 5), (2, 2), (1, 1)]

    assert await audit.append(ev(6)) == 4
    assert await audit.append(ev(7), "c") is None
    assert await audit.append_many([(ev(8), None), (ev(9), None), (ev(10), "d")]) == [5, 6, 7]
    report = await audit.verify()
    assert report.ok and report.rows == 7, report


async def test_graph_storer_store_many(services):
    """The slice's commit path end to end: one embedding call for the whole group, stats per request
    in order, one `graph_stored` audit row per graph, and a retried group re-audits nothing."""
    embedder = CountingEmbedder(services.embedder)
    storer = GraphStorer(services.store, embedder, canonical_threshold=0.9)

    def requests() -> list[StoreRequest]:
        return [StoreRequest(graph=_store_input("sg1", "Insufficient memory request", "Out of memory"),
                             run_id="wf-1", scope="store"),
                StoreRequest(graph=_store_input("sg2", "Expired proxy", "Stage-in failed"),
                             run_id="wf-2", scope="store")]

    stats = await storer.store_many(requests())
    assert [s.model_dump() for s in stats] == [
        {"graph_id": "sg1", "nodes": 3, "edges": 2, "passages": 2},
        {"graph_id": "sg2", "nodes": 3, "edges": 2, "passages": 2},
    ]
    assert len(embedder.calls) == 1
    # Names of canonical targets (Cause, Resolution) and non-blank passages of both graphs, in one call.
    assert sorted(embedder.calls[0]) == sorted([
        "Insufficient memory request", "fix for Insufficient memory request",
        "sg1: Out of memory because Insufficient memory request", "Insufficient memory request",
        "Expired proxy", "fix for Expired proxy", "sg2: Stage-in failed because Expired proxy", "Expired proxy"])

    store = services.store
    audit_rows = lambda: _scalar(store, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'")  # noqa: E731
    assert await audit_rows() == 2
    bodies = [r["body"] for r in reversed(await store.audit.tail(10)) if r["kind"] == "graph_stored"]
    assert [(b["graph_id"], b["edges"], b["passages"], b["warnings"]) for b in bodies] == [
        ("sg1", 2, 2, ["warning of sg1"]), ("sg2", 2, 2, ["warning of sg2"])]
    assert await store.knowledge.edges_for_graph("sg2") == {
        ("Symptom", "Stage-in failed", "indicate", "Cause", "Expired proxy"),
        ("Cause", "Expired proxy", "solved_by", "Resolution", "fix for Expired proxy")}
    assert await _scalar(store, "SELECT count(*) FROM human_requests") == 2
    assert await _scalar(store, "SELECT count(*) FROM nodes WHERE kind = 'Cause' AND embedding IS NOT NULL") == 2
    counts = await store.knowledge.row_counts()

    again = await storer.store_many(requests())
    assert again == stats
    assert len(embedder.calls) == 2
    assert await audit_rows() == 2
    assert await store.knowledge.row_counts() == counts
    report = await store.audit.verify()
    assert report.ok and report.rows == 2, report
