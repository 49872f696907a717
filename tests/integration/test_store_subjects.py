"""Stored graphs and their audit rows belong to a subject — this batch stored this graph from this
file — not to the attempt that wrote them.

One audit row per subject however many attempts or workflows store it; a graph and its row commit
together or not at all; a second file claiming the same graph in one batch is refused, not allowed
to overwrite the first; a group the database refuses costs only the graph it refuses.
"""

from __future__ import annotations

import psycopg
import pytest

from bamboo.accumulation.storing import GraphStorer, StoreRefused, StoreRequest
from bamboo.models.graph import WriteStats
from tests.integration.test_group_store import _store_input


def _storer(services) -> GraphStorer:
    return GraphStorer(services.store, services.embedder, canonical_threshold=0.9)


async def _scalar(services, sql: str, *args):
    async with services.store.pool.connection() as conn:
        return (await (await conn.execute(sql, args or None)).fetchone())[0]


async def test_the_slice_and_the_escalated_workflow_audit_a_graph_once(services):
    """The slice stored it and died before reporting; the workflow it was escalated to stores it again
    under another run id. Same scope, same graph: one `graph_stored` row."""
    storer = _storer(services)
    lane = StoreRequest(graph=_store_input("g1", "Insufficient memory", "OOM"), run_id="populate:b",
                        scope="populate:b:run1", source="/in/a.json")
    child = StoreRequest(graph=_store_input("g1", "Insufficient memory", "OOM"), run_id="accumulate:b:0",
                         scope="populate:b:run1", source="/in/a.json")
    [first] = await storer.store_many([lane])
    [again] = await storer.store_many([child])
    assert isinstance(first, WriteStats) and again == first
    assert await _scalar(services, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'") == 1
    # A later batch re-learning the incident is a new subject, audited again.
    later = StoreRequest(graph=_store_input("g1", "Insufficient memory", "OOM"), run_id="populate:b",
                         scope="populate:b:run2", source="/in/a.json")
    await storer.store_many([later])
    assert await _scalar(services, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'") == 2


async def test_a_second_file_for_the_same_graph_in_one_batch_is_refused(services):
    storer = _storer(services)

    def request(source: str, cause: str, scope: str = "populate:b:1") -> StoreRequest:
        return StoreRequest(graph=_store_input("panda:7:broken", cause, "OOM"), run_id="r", scope=scope, source=source)

    # In one group: the first stays, the second is refused and names the first.
    first, second = await storer.store_many([request("/in/a.json", "First cause"), request("/in/b.json", "Other cause")])
    assert isinstance(first, WriteStats)
    assert isinstance(second, StoreRefused) and "already stored from /in/a.json" in second.reason
    # In a later group of the same batch: refused again, and the first's graph is untouched.
    [third] = await storer.store_many([request("/in/c.json", "Third cause")])
    assert isinstance(third, StoreRefused) and "/in/a.json" in third.reason
    edges = await services.store.knowledge.edges_for_graph("panda:7:broken")
    assert ("Symptom", "OOM", "indicate", "Cause", "First cause") in edges
    assert not any("Other cause" in e or "Third cause" in e for e in edges)
    assert await _scalar(services, "SELECT count(*) FROM nodes WHERE name IN ('Other cause', 'Third cause')") == 0
    assert await _scalar(services, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'") == 1
    # Another batch may re-learn the graph from another file: that is an update, not a duplicate.
    [other_batch] = await storer.store_many([request("/in/c.json", "Third cause", scope="populate:b:2")])
    assert isinstance(other_batch, WriteStats)


async def test_a_graph_commits_only_with_its_audit_row(services, database_url):
    """If the audit row cannot be written, neither is the graph: no stored graph goes unaudited."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
                           "BEGIN RAISE EXCEPTION 'audit insert refused'; END $$")
        await conn.execute("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION refuse()")
    storer = _storer(services)
    request = StoreRequest(graph=_store_input("g9", "Expired proxy", "Stage-in failed"), run_id="r",
                           scope="populate:b:1", source="/in/g9.json")
    with pytest.raises(psycopg.Error, match="audit insert refused"):
        await storer.store_many([request])
    assert await _scalar(services, "SELECT count(*) FROM graphs WHERE graph_id = 'g9'") == 0
    assert await _scalar(services, "SELECT count(*) FROM passages WHERE graph_id = 'g9'") == 0


async def test_a_group_the_database_refuses_costs_only_the_refused_graph(services):
    """A value the reader let through but the database refuses (here a task id over bigint) fails that
    graph alone, with a reason; before, it failed the whole group and with it the slice."""
    storer = _storer(services)
    good = [StoreRequest(graph=_store_input(f"ok{i}", f"Cause {i}", "OOM"), run_id="r", scope="s", source=f"/in/{i}")
            for i in range(3)]
    bad = _store_input("bad", "Cause bad", "OOM").model_copy(update={"task_id": 2**63})
    results = await storer.store_many([good[0], StoreRequest(graph=bad, run_id="r", scope="s", source="/in/bad"),
                                       good[1], good[2]])
    assert [type(r).__name__ for r in results] == ["WriteStats", "StoreRefused", "WriteStats", "WriteStats"]
    assert "out of range" in results[1].reason
    assert await _scalar(services, "SELECT count(*) FROM graphs") == 3
    assert await _scalar(services, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'") == 3
