"""PopulateBatch with its store and slice activities faked: the batch's own scheduling, counting and
pause/resume, through its public signals, query and result."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from temporalio.client import Client, WorkflowHandle

from bamboo.accumulation import contract
from bamboo.accumulation.contract import (
    ItemOutcome, PopulateInput, PopulateProgress, PopulateResult, SliceInput, SliceResult, SourceListing,
    SourcePageInput,
)
from bamboo.contract import implements
from bamboo.models.incident import IncidentSource
from tests.workflows.conftest import until, workers
from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch


class FakeStore:
    """A listing of ``total`` incidents and slices that store every incident they are given. With ``gated``,
    each slice waits for the test to open its gate, so the test decides when a slice ends."""

    def __init__(self, total: int, *, gated: bool = False) -> None:
        self.total = total
        self.gated = gated
        self.slices: list[SliceInput] = []
        self.started = asyncio.Event()
        self.gates: dict[int, asyncio.Event] = {}

    @implements(contract.list_incident_sources)
    async def list_incident_sources(self, path: str) -> SourceListing:
        return SourceListing(ref=f"listing:{path}", total=self.total)

    @implements(contract.read_incident_sources)
    async def read_incident_sources(self, page: SourcePageInput) -> list[IncidentSource]:
        end = min(page.offset + page.limit, self.total)
        return [IncidentSource(path=f"incident-{i}.json") for i in range(page.offset, end)]

    @implements(contract.learn_slice)
    async def learn_slice(self, inp: SliceInput) -> SliceResult:
        self.slices.append(inp)
        self.started.set()
        if self.gated:
            await self.gates.setdefault(inp.offset, asyncio.Event()).wait()
        return SliceResult(outcomes=[ItemOutcome(index=i, status="stored") for i in range(inp.offset, inp.offset + inp.count)])

    def open(self, offset: int) -> None:
        self.gates.setdefault(offset, asyncio.Event()).set()

    def activities(self) -> list:
        return [self.list_incident_sources, self.read_incident_sources, self.learn_slice]


async def start(client: Client, queue: str, **fields) -> WorkflowHandle:
    batch = f"test-{uuid.uuid4().hex[:8]}"
    inp = PopulateInput(batch_id=batch, path="/incidents", **fields)
    return await client.start_workflow(PopulateBatch.run, inp, id=contract.batch_workflow_id(batch), task_queue=queue)


async def progress_when(handle: WorkflowHandle, wanted: Callable[[PopulateProgress], bool]) -> PopulateProgress:
    """The batch's progress once ``wanted`` holds for it."""
    return await until(lambda: handle.query(contract.PROGRESS_QUERY, result_type=PopulateProgress), wanted)


async def test_a_batch_learns_every_incident_of_its_listing_in_slices(temporal: Client) -> None:
    store = FakeStore(total=10)
    async with workers(temporal, [PopulateBatch, AccumulateIncident], store.activities()) as queue:
        handle = await start(temporal, queue, concurrency=2, chunk_size=4)
        result: PopulateResult = await handle.result()
    assert (result.total, result.done, result.failed, result.skipped, result.escalated) == (10, 10, 0, 0, 0)
    assert not result.cancelled
    # Every incident was handed to exactly one slice, and no slice was wider than the batch's concurrency.
    covered = [i for s in sorted(store.slices, key=lambda s: s.offset) for i in range(s.offset, s.offset + s.count)]
    assert covered == list(range(10))
    assert all(s.parallelism <= 2 for s in store.slices)


async def test_a_paused_batch_starts_no_slice_until_it_is_resumed(temporal: Client) -> None:
    store = FakeStore(total=3, gated=True)
    async with workers(temporal, [PopulateBatch, AccumulateIncident], store.activities()) as queue:
        handle = await start(temporal, queue, concurrency=1, chunk_size=1)
        await asyncio.wait_for(store.started.wait(), 60)  # a bound, so a batch that never starts fails
        await handle.signal(contract.PAUSE_SIGNAL)
        await progress_when(handle, lambda p: p.paused)
        store.open(0)
        # The first slice ended while the batch was paused: it is counted, and nothing took its place.
        paused = await progress_when(handle, lambda p: p.slices_done == 1)
        assert (paused.done, paused.running, paused.running_slices, paused.finished) == (1, 0, [], False)
        assert [s.offset for s in store.slices] == [0]

        await handle.signal(contract.RESUME_SIGNAL)
        for offset in (1, 2):
            store.open(offset)
        result: PopulateResult = await handle.result()
    assert (result.total, result.done, result.failed) == (3, 3, 0)
    assert [s.offset for s in store.slices] == [0, 1, 2]
