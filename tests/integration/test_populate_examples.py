"""The bundled examples populate into the expected graph; populating again skips every incident, and
relearning them all adds no row."""

from __future__ import annotations

import json


from tests.conftest import EXAMPLES
from tests.integration.helpers import populate


async def test_examples_yield_expected_nodes_and_edges_and_repopulate_adds_nothing(client, running_worker, services):
    files = sorted(EXAMPLES.glob("*.json"))
    assert len(files) >= 30
    result = await populate(client, EXAMPLES, concurrency=8)
    assert (result.done, result.failed) == (len(files), 0), result.failures

    store = services.store.knowledge
    for f in files:
        inc = json.loads(f.read_text())
        exp = inc["expected"]
        graph_id = f"panda:{inc['task_data']['jediTaskID']}:{inc['task_data']['status']}"
        edges = await store.edges_for_graph(graph_id)
        cause = exp["cause"]
        assert ("Symptom", exp["symptom"], "indicate", "Cause", cause) in edges, (f.name, sorted(edges)[:5])
        assert ("Symptom", exp["status_symptom"], "indicate", "Cause", cause) in edges, f.name
        assert any(e[2] == "solved_by" and e[1] == cause for e in edges), f.name
        procs = [e for e in edges if e[2] == "investigated_by" and e[1] == cause]
        assert len(procs) == len(inc["resolution_record"]["procedure"]), f.name
        for feature in exp["features"]:
            assert any(e[0] == "Task_Feature" and e[1] == feature for e in edges), (f.name, feature)

    before = await store.row_counts()
    stats = await store.stats()
    assert stats.edges.get("indicate", 0) > 0 and stats.nodes.get("Cause", 0) >= 20
    again = await populate(client, EXAMPLES, concurrency=8)
    assert (again.done, again.skipped, again.failed) == (0, len(files), 0)
    assert await store.row_counts() == before
    relearned = await populate(client, EXAMPLES, concurrency=8, relearn=True)
    assert (relearned.done, relearned.skipped, relearned.failed) == (len(files), 0, 0)
    assert await store.row_counts() == before
