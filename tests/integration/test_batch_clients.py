"""The batch clients on the real stack: a pause sent with the start through ``BatchClient`` holds a batch before
anything runs, the batch's controls (pause, resume, cancel) are the contract's and are refused for what is not a
running batch, and ``PopulateClient`` attaches to a batch that runs instead of starting it again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from bamboo.accumulation.client import PopulateClient
from bamboo.accumulation.contract import (
    POPULATE_WORKFLOW, PopulateInput, PopulateProgress, PopulateResult, batch_workflow_id,
)
from bamboo.batch.client import BatchClient, BatchError, BatchNotFound
from bamboo.contract import Kind
from tests.integration.helpers import write_incidents


def _write(tmp_path: Path, n: int) -> Path:
    return write_incidents(tmp_path / "incidents", n, prefix="bc", first_task=43000000)


async def _listed(progress):
    """The batch's progress once it has read its listing (its first workflow task may not have run yet)."""
    for _ in range(200):
        try:
            p = await progress()
            if p.total is not None:
                return p
        except Exception:  # noqa: BLE001 — no workflow task has answered yet
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the batch never said how many items it has")


async def _graphs(services) -> int:
    return (await services.store.knowledge.stats()).graphs


async def test_a_pause_sent_with_the_start_through_the_batch_client_holds_the_batch(
        client, running_worker, services, tmp_path):
    batches = BatchClient(client, {Kind.POPULATE: PopulateProgress})
    bid = f"bc-{uuid.uuid4().hex[:8]}"
    batch = await batches.start(POPULATE_WORKFLOW, PopulateInput(batch_id=bid, path=str(_write(tmp_path, 4))),
                                workflow_id=batch_workflow_id(bid), kind=Kind.POPULATE,
                                progress_type=PopulateProgress, result_type=PopulateResult, paused=True)
    await _listed(batch.progress)
    await asyncio.sleep(2.0)  # time for a batch that ignored the pause to hand out its slices
    held = await batch.progress()
    assert held.paused and held.total == 4 and held.done == 0 and held.running == 0, held
    assert await _graphs(services) == 0

    [row] = [b for b in await batches.batches() if b.workflow_id == batch.id]
    assert row.kind == Kind.POPULATE and row.status == "running" and not row.detail
    assert isinstance(row.progress, PopulateProgress) and row.progress.paused

    await batches.resume(batch.id)
    result = await batch.result()
    assert (result.done, result.failed, result.cancelled) == (4, 0, False), result.failures
    assert await _graphs(services) == 4
    with pytest.raises(BatchError, match=f"batch {batch.id} is not running; it cannot be told to pause"):
        await batches.pause(batch.id)


async def test_the_batch_client_pauses_and_cancels_by_the_contracts_names_and_refuses_the_rest(
        client, running_worker, services, tmp_path):
    populate = PopulateClient(client)
    batches = BatchClient(client, {Kind.POPULATE: PopulateProgress})
    batch = await populate.start(PopulateInput(batch_id=f"bc-{uuid.uuid4().hex[:8]}",
                                               path=str(_write(tmp_path, 6)), concurrency=1, chunk_size=1),
                                 paused=True)
    await _listed(batch.progress)
    await batches.resume(batch.id)
    assert not (await batches.progress(batch.id, Kind.POPULATE)).paused
    await batches.pause(batch.id)
    paused = await batches.progress(batch.id, Kind.POPULATE)
    assert isinstance(paused, PopulateProgress) and paused.paused
    with pytest.raises(BatchError, match="unknown batch action 'explode'; use one of pause, resume, cancel"):
        await batches.control(batch.id, "explode")
    await batches.cancel(batch.id)
    result = await batch.result()
    assert result.cancelled and result.total == 6, result

    with pytest.raises(BatchNotFound, match="no batch populate:never-started"):
        await batches.cancel(batch_workflow_id("never-started"))


async def test_the_populate_client_attaches_to_a_running_batch(client, running_worker, services, tmp_path):
    populate = PopulateClient(client)
    bid = f"bc-{uuid.uuid4().hex[:8]}"
    inp = PopulateInput(batch_id=bid, path=str(_write(tmp_path, 4)))
    started = await populate.start(inp, paused=True)
    first = await _listed(started.progress)
    assert first.paused and first.done == 0

    attached = await populate.attach(bid)
    again = await populate.start(inp)  # the same batch started again: the running one, not a second
    assert attached.id == again.id == started.id == batch_workflow_id(bid) and attached.batch_id == bid
    runs = {(await b.handle.describe()).run_id for b in (started, attached, again)}
    assert len(runs) == 1, runs
    assert (await attached.progress()).paused and await attached.running()

    await attached.resume()
    result = await attached.result()
    assert isinstance(result, PopulateResult) and (result.done, result.failed) == (4, 0), result.failures
    assert (await populate.result(bid)).done == 4
    assert not await attached.running() and await attached.status() == "completed"

    with pytest.raises(BatchNotFound, match=f"no batch {batch_workflow_id('nowhere-' + bid)}"):
        await populate.attach("nowhere-" + bid)
