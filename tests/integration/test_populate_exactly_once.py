"""A slice that stored incidents and died before reporting them: its retried attempt, on another
worker, must neither audit them a second time nor report one failed (here: its file is gone by
then) — they were stored.

The slice's worker commits its first group, then hangs, and is stopped; the slice's heartbeats
stop, Temporal retries it on the next worker, and the retry takes what the store shows this batch
stored as stored. Without that, the retry learned and audited the committed incidents again (one
extra `graph_stored` row each would be refused by the audit key, but the one whose file had been
removed failed, although it was stored).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from bamboo.accumulation.storing import GraphStorer
from bamboo.samples import generate_incidents, write_incidents
from tests.integration.helpers import populate

pytestmark = pytest.mark.slow

N = 12


async def _graph_ids(services) -> list[str]:
    async with services.store.pool.connection() as conn:
        return [r[0] for r in await (await conn.execute("SELECT graph_id FROM graphs ORDER BY graph_id")).fetchall()]


async def _audited(services) -> list[str]:
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT body->>'graph_id' FROM audit WHERE kind = 'graph_stored' ORDER BY seq")).fetchall()
    return [r[0] for r in rows]


@contextlib.asynccontextmanager
async def _worker(settings, services):
    from worker.main import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, services=services, stop=stop))
    await asyncio.sleep(0.3)
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


async def test_incidents_a_dead_slice_stored_are_neither_audited_again_nor_failed(
        settings, services, client, llm_server, tmp_path, monkeypatch):
    incidents = generate_incidents(N, seed=3)
    write_incidents(incidents, tmp_path / "batch")
    file_of = {inc.graph_id(): tmp_path / "batch" / f"{inc.incident_id}.json" for inc in incidents}

    real = GraphStorer.store_many
    committed = asyncio.Event()

    async def commit_then_hang(self, requests):
        result = await real(self, requests)
        committed.set()
        await asyncio.Event().wait()  # the worker dies here, after the commit, before any report
        return result

    monkeypatch.setattr(GraphStorer, "store_many", commit_then_hang)
    async with _worker(settings, services):
        handle = await populate(client, tmp_path / "batch", concurrency=4, every=1000, wait=False)
        await asyncio.wait_for(committed.wait(), 60)
    monkeypatch.setattr(GraphStorer, "store_many", real)

    stored_before = await _graph_ids(services)
    assert stored_before, "the dead slice must have stored incidents before it died"
    file_of[stored_before[0]].unlink()  # gone by the time its own workflow looks at it

    async with _worker(settings, services):
        result = await asyncio.wait_for(handle.result(), 180)

    assert (result.done, result.failed) == (N, 0), result.failures
    assert await _graph_ids(services) == sorted(file_of)
    audited = await _audited(services)
    assert sorted(audited) == sorted(file_of), "exactly one graph_stored row per stored incident"
    assert (await services.store.audit.verify()).ok
