"""Canonical matching of a group's new names runs off the event loop, with a budget, and
matches exactly as the name-by-name loop did: the nearest earlier new name at or above the threshold that
the name does not contradict, the first on a tie."""

from __future__ import annotations

import asyncio
import math
import random
import threading

import numpy as np

import bamboo.store.canonical as canonical
from bamboo.models.graph import GraphNode, KnowledgeGraph
from bamboo.models.labels import contradicts
from bamboo.offload import in_thread

DIM = 8


class FakeStore:
    """`nearest_nodes` answers from a fixed table: (kind, axis of the vector) -> stored name."""

    def __init__(self, stored: dict[tuple[str, int], str] | None = None) -> None:
        self.stored = stored or {}

    async def nearest_nodes(self, queries, threshold):
        return [self.stored.get((kind, int(np.argmax(vec)))) for kind, vec in queries]


def _vec(*weights: float) -> list[float]:
    return list(weights) + [0.0] * (DIM - len(weights))


def _graph(names: list[tuple[str, str]]) -> KnowledgeGraph:
    g = KnowledgeGraph()
    for kind, name in names:
        g.add_node(GraphNode(kind=kind, name=name))
    return g


def test_the_matching_runs_in_a_thread_with_a_budget(monkeypatch):
    used: list[tuple[str, float, str]] = []
    checked_on: list[bool] = []

    async def recording(fn, /, *args, budget_s, what):
        used.append((fn.__name__, budget_s, what))
        return await in_thread(fn, *args, budget_s=budget_s, what=what)

    def watched(a: str, b: str) -> bool:
        checked_on.append(threading.current_thread() is threading.main_thread())
        return contradicts(a, b)

    monkeypatch.setattr(canonical, "in_thread", recording, raising=False)
    monkeypatch.setattr(canonical, "contradicts", watched)
    graphs = [(_graph([("Cause", f"Memory request too low {i}"), ("Procedure", f"Check the memory {i}")]),
               [_vec(1.0, 0.01 * i), _vec(0.0, 1.0)]) for i in range(5)]
    store = FakeStore({("Cause", 0): "Insufficient memory request"})
    out = asyncio.run(canonical.canonicalise_graphs(graphs, store, 0.9))

    assert len(used) == 1 and used[0][1] == canonical.MATCH_BUDGET_S and used[0][2]
    assert checked_on and not any(checked_on), "names were compared on the event loop's thread"
    assert [sorted(c.renames.values(), key=str) for c in out][0][0].name == "Insufficient memory request"
    # The procedures of graphs 1..4 land on graph 0's, the first new name of their kind.
    assert [c.renames.get(("Procedure", f"Check the memory {i}")) for i, c in enumerate(out)][1:] == [
        canonical.NodeRef(kind="Procedure", name="Check the memory 0")] * 4


def _at(degrees: float) -> list[float]:
    """A unit vector at this angle in the first plane: two of them have the cosine of their difference."""
    return _vec(math.cos(math.radians(degrees)), math.sin(math.radians(degrees)))


def test_within_a_call_the_nearest_uncontradicted_earlier_name_wins():
    graphs = [
        (_graph([("Procedure", "Inspect stage-in logs")]), [_at(0)]),
        (_graph([("Procedure", "Inspect transfer logs")]), [_at(40)]),  # 0.77 to the first: new
        (_graph([("Procedure", "Inspect stage-out logs")]), [_at(15)]),  # nearest the first, which it contradicts
        (_graph([("Procedure", "Inspect the stage-in logs")]), [_at(18)]),  # 0.95 and 0.93: the nearer
        (_graph([("Procedure", "Look at transfer logs")]), [_at(30)]),  # only the second is above 0.9
        (_graph([("Procedure", "Something else")]), [_vec(0.0, 0.0, 1.0)]),
    ]
    out = asyncio.run(canonical.canonicalise_graphs(graphs, FakeStore(), 0.9))
    renamed = [next(iter(c.renames.values())).name if c.renames else None for c in out]
    assert renamed == [None, None, "Inspect transfer logs", "Inspect stage-in logs", "Inspect transfer logs", None]
    assert [list(c.canonical_embeddings) for c in out] == [
        [("Procedure", "Inspect stage-in logs")], [("Procedure", "Inspect transfer logs")], [], [], [],
        [("Procedure", "Something else")]]


def _name_by_name(graphs, stored, threshold):
    """The loop the matching replaced (every earlier new name compared one by one), as the reference."""
    introduced: dict[str, list[tuple[str, np.ndarray]]] = {}
    matches = iter(stored)
    out = []
    for graph, vecs in graphs:
        renames = {}
        for node, vec in zip(canonical.canonical_targets(graph), vecs):
            match = next(matches)
            if match and contradicts(node.name, match):
                match = None
            if not match:
                candidates = [c for c in introduced.get(node.kind, []) if not contradicts(node.name, c[0])]
                if candidates:
                    sims = np.stack([c for _, c in candidates]) @ canonical._unit(vec)
                    best = int(np.argmax(sims))
                    match = candidates[best][0] if float(sims[best]) >= threshold else None
            if match and match != node.name:
                renames[(node.kind, node.name)] = match
            elif not match:
                introduced.setdefault(node.kind, []).append((node.name, canonical._unit(vec)))
        out.append(renames)
    return out


def test_the_matrix_matching_agrees_with_the_name_by_name_loop():
    rng = random.Random(7)
    words = ["in", "out", "not", "check", "proxy", "memory", "site", "raise", "lower", "queue"]
    centres = [np.asarray([rng.gauss(0, 1) for _ in range(DIM)]) for _ in range(6)]
    graphs, stored = [], []
    for g in range(60):
        names = [(rng.choice(canonical.CANONICAL_KINDS), " ".join(rng.sample(words, 3)) + f" {g}.{j}") for j in range(5)]
        vecs = [list(centres[rng.randrange(6)] + np.asarray([rng.gauss(0, 0.15) for _ in range(DIM)])) for _ in names]
        graph = _graph(names)
        graphs.append((graph, vecs))
        stored += [rng.choice([None, None, None, "check the site"]) for _ in canonical.canonical_targets(graph)]

    class Replay:
        async def nearest_nodes(self, queries, threshold):
            assert len(queries) == len(stored)
            return stored

    out = asyncio.run(canonical.canonicalise_graphs(graphs, Replay(), 0.9))
    got = [{k: v.name for k, v in c.renames.items()} for c in out]
    assert got == _name_by_name(graphs, stored, 0.9)
    assert sum(len(r) for r in got) > 50  # not vacuous: many names were merged
