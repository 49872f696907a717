"""One meaning for concurrency (issue 25): a worker makes at most its BAMBOO_LLM_CONCURRENCY model calls at
once, whoever makes them, publishes that number in its poller identity, and a client starting a batch says
what the batch's --concurrency will get. No server: the identities and the model endpoint are faked."""

from __future__ import annotations

import asyncio
import json

import httpx
from pydantic import BaseModel

from bamboo.cli.concurrency_note import concurrency_note
from bamboo.settings import Settings
from bamboo.worker_slots import Offer, llm_slots, offer, with_llm_slots
from worker.services import SlottedLLMClient


def test_a_worker_identity_carries_its_slots_and_plain_identities_carry_none():
    assert llm_slots(with_llm_slots("1234@host", 32)) == 32
    assert llm_slots("1234@host") is None
    assert llm_slots("1234@host-llm-slots=9") is None  # only a word of its own counts


def test_the_offer_sums_worker_processes_and_counts_a_restarted_one_once_with_its_latest_slots():
    found = offer([(with_llm_slots("1@a", 32), 10.0), (with_llm_slots("1@a", 4), 20.0),
                   (with_llm_slots("2@b", 8), 5.0)])
    assert found == Offer(workers=2, slots=12)
    assert found.granted(32) == 12 and found.granted(6) == 6
    assert offer([("3@c", 1.0)]).granted(4) is None  # a worker that publishes nothing: cannot be told


def test_concurrency_above_the_workers_slots_is_reported_with_the_setting_that_limits_it():
    note = concurrency_note(32, Offer(workers=1, slots=16))
    assert "gets at most 16 model calls at once" in note and "BAMBOO_LLM_CONCURRENCY" in note, note
    within = concurrency_note(8, Offer(workers=1, slots=16))
    assert "up to 8 model calls at once" in within and "gets at most" not in within, within
    assert "no worker polls" in concurrency_note(8, Offer(workers=0, slots=0))
    assert "cannot be told" in concurrency_note(8, Offer(workers=1, slots=0, unpublished=1))


class _Answer(BaseModel):
    ok: bool


async def test_the_worker_client_holds_every_caller_to_its_slots():
    """Two callers (as two slices, or a slice and an analysis, on one worker) asking 6 calls each of a worker
    with 3 slots: the endpoint never sees more than 3 at once. Before, each slice was capped on its own, so
    two slices made twice the worker's setting."""
    in_flight = peak = 0
    release = asyncio.Event()

    async def endpoint(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 3:
            release.set()  # the slots are full: let every call answer, once the others had their turns
        await release.wait()
        for _ in range(100):  # a caller beyond the slots would arrive here and be counted
            await asyncio.sleep(0)
        in_flight -= 1
        body = {"choices": [{"message": {"content": json.dumps({"ok": True})}, "finish_reason": "stop"}]}
        return httpx.Response(200, json=body)

    settings = Settings(_env_file=None, llm_base_url="http://model.invalid/v1", llm_concurrency=3)
    llm = SlottedLLMClient.for_worker(settings, transport=httpx.MockTransport(endpoint))

    async def caller() -> list[_Answer]:
        return list(await asyncio.gather(*(llm.structured(system="s", user="u", output=_Answer) for _ in range(6))))

    answers = await asyncio.gather(caller(), caller())
    assert all(a.ok for batch in answers for a in batch)
    assert peak == 3
