"""Slices that start together read a parked listing once: one fetch, one split, one copy held."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from activities.accumulate import AccumulateActivities
from bamboo.models.incident import IncidentSource
from bamboo.store.blobs import BlobNotFound


class CountingBlobs:
    def __init__(self, payload: bytes, failures: int = 0) -> None:
        self.payload, self.failures, self.fetches = payload, failures, 0

    async def get(self, ref: str) -> bytes:
        self.fetches += 1
        await asyncio.sleep(0.05)  # long enough for every concurrent reader to miss the cache
        if self.failures:
            self.failures -= 1
            raise BlobNotFound(ref)
        return self.payload


def activities(blobs: CountingBlobs) -> AccumulateActivities:
    services = SimpleNamespace(store=SimpleNamespace(blobs=blobs), embedder=None,
                               settings=SimpleNamespace(canonical_match_threshold=0.9))
    return AccumulateActivities(services)  # type: ignore[arg-type]


LISTING = "\n".join(IncidentSource(path=f"/data/{i}.json").model_dump_json(exclude_none=True) for i in range(10)).encode()


async def test_concurrent_page_reads_fetch_the_listing_once() -> None:
    blobs = CountingBlobs(LISTING)
    acts = activities(blobs)
    pages = await asyncio.gather(*(acts._sources("ref", offset, 2) for offset in range(0, 10, 2)))
    assert [s.path for page in pages for s in page] == [f"/data/{i}.json" for i in range(10)]
    assert blobs.fetches == 1


async def test_a_failed_load_is_tried_again_by_the_next_read() -> None:
    blobs = CountingBlobs(LISTING, failures=1)
    acts = activities(blobs)
    with pytest.raises(BlobNotFound):
        await acts._sources("ref", 0, 2)
    assert [s.path for s in await acts._sources("ref", 0, 1)] == ["/data/0.json"]
    assert blobs.fetches == 2


async def test_a_cancelled_reader_leaves_the_load_to_the_others() -> None:
    blobs = CountingBlobs(LISTING)
    acts = activities(blobs)
    first = asyncio.create_task(acts._sources("ref", 0, 1))
    second = asyncio.create_task(acts._sources("ref", 1, 1))
    await asyncio.sleep(0.01)
    first.cancel()
    assert [s.path for s in await second] == ["/data/1.json"]
    assert blobs.fetches == 1
