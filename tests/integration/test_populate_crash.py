"""SIGKILL the worker in the middle of a 100-incident batch; a new worker finishes it, and every
incident is stored exactly once (no duplicate nodes, edges, provenance, passages or audit rows)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.accumulation.contract import PopulateProgress
from bamboo.samples import generate_incidents, write_incidents
from tests.integration.helpers import populate
from tests.services import spawn_worker
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer

pytestmark = pytest.mark.slow


async def _expected(incidents, settings, base_url):
    """What each graph must contain, computed by the same strategy outside Temporal."""
    llm = LLMClient(base_url=base_url, model="scripted")
    strategy = PandaExtractionStrategy(llm, settings.pseudonym_key.get_secret_value().encode())
    out = {}
    for inc in incidents:
        res = await strategy.extract(inc)
        out[inc.graph_id()] = (
            {(e.src.kind, e.src.name, e.kind, e.dst.kind, e.dst.name) for e in res.graph.edges},
            len([p for p in res.passages if p.content.strip()]),
            {(n.kind, n.name) for n in res.graph.nodes},
        )
    await llm.aclose()
    return out


async def _a_slice_is_on_the_worker(handle) -> bool:
    """A slice activity a worker has started and not finished: killing the worker now cuts it off."""
    from temporalio.api.enums.v1 import PendingActivityState

    description = await handle.describe()
    return any(a.activity_type.name == "learn_slice" and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
               for a in description.raw_description.pending_activities)


async def test_sigkill_mid_batch_then_new_worker_completes_exactly_once(stack, database_url, services, client, tmp_path):
    incidents = generate_incidents(100, seed=7)
    write_incidents(incidents, tmp_path / "batch")
    with ScriptedLLMServer(accumulation_handler(), latency_s=0.1) as llm:
        settings = stack.settings(database_url, llm.base_url, llm_concurrency=8)
        worker = spawn_worker(settings, tmp_path / "w1.log")
        handle = await populate(client, tmp_path / "batch", concurrency=8, every=30, wait=False)
        for _ in range(600):
            p = await handle.query("progress", result_type=PopulateProgress)
            if p.done >= 25 and await _a_slice_is_on_the_worker(handle):  # mid-batch, mid-slice
                break
            await asyncio.sleep(0.05)
        assert 0 < p.done < 100, "the kill must land mid-batch"
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        replacement = spawn_worker(settings, tmp_path / "w2.log")
        try:
            result = await asyncio.wait_for(handle.result(), 300)
        finally:
            replacement.terminate()
            replacement.wait(30)
        expected = await _expected(incidents, settings, llm.base_url)

    assert (result.done, result.failed) == (100, 0), result.failures
    assert result.escalated == 0, "retried slices resume from their heartbeats instead of giving their incidents up"
    store = services.store.knowledge
    counts = await store.row_counts()
    assert counts["graphs"] == 100
    all_nodes = set().union(*(nodes for _, _, nodes in expected.values()))
    assert counts["nodes"] == len(all_nodes)
    all_edges = set().union(*(edges for edges, _, _ in expected.values()))
    assert counts["edges"] == len(all_edges)
    assert counts["edge_provenance"] == sum(len(edges) for edges, _, _ in expected.values())
    assert counts["passages"] == sum(n for _, n, _ in expected.values())
    for graph_id, (edges, _, _) in expected.items():
        assert await store.edges_for_graph(graph_id) == edges, graph_id
    async with services.store.pool.connection() as conn:
        stored_rows = (await (await conn.execute("SELECT count(*) FROM audit WHERE kind = 'graph_stored'")).fetchone())[0]
    assert stored_rows == 100
    assert (await services.store.audit.verify()).ok
    # The kill cut off running slices: their retries resumed from their heartbeats.
    retried, run_id = [], handle.first_execution_run_id
    while run_id:
        next_run = None
        async for e in client.get_workflow_handle(handle.id, run_id=run_id).fetch_history_events():
            if e.HasField("activity_task_started_event_attributes") and e.activity_task_started_event_attributes.attempt > 1:
                retried.append(run_id)
            if e.HasField("workflow_execution_continued_as_new_event_attributes"):
                next_run = e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        run_id = next_run
    assert retried, "no slice was retried: the kill missed the slices"
