"""The server hears a long activity's heartbeats often enough to survive a late one.

Activities beat every third of their heartbeat timeout (`activities.heartbeat.with_heartbeats`) so that
two beats may be lost or late before Temporal takes the worker for dead. But the SDK sends an activity's
heartbeats to the server at most every 0.8 x that timeout, however often the activity beats, unless the
worker caps the throttle: 8 s apart for a 10 s timeout, so any stall of 2 s (a loaded machine, a slow
server) timed a live slice out. In a full test run that happened to a slice waiting out a database
outage: it was retried, and every incident it had extracted but not yet stored went to the model again.

The test runs the production worker, gives a populate slice a model that takes 10 s per answer, and reads
the heartbeat times the server records for the running slice.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from bamboo.contract import HEARTBEAT
from tests.integration.helpers import populate, write_incidents
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer

pytestmark = pytest.mark.slow

MODEL_LATENCY_S = 10.0


@pytest.fixture
def llm_server():
    with ScriptedLLMServer(accumulation_handler(), latency_s=MODEL_LATENCY_S) as server:
        yield server


async def _heartbeats_seen(handle, until_s: float) -> list[datetime]:
    """Every distinct last-heartbeat time the server shows for the batch's running activities."""
    seen: list[datetime] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + until_s
    while loop.time() < deadline:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.HasField("last_heartbeat_time"):
                beat = pending.last_heartbeat_time.ToDatetime()
                if not seen or beat > seen[-1]:
                    seen.append(beat)
        await asyncio.sleep(0.1)
    return seen


async def test_the_server_hears_a_slice_at_least_every_third_of_its_heartbeat_timeout(
        running_worker, client, tmp_path):
    write_incidents(tmp_path / "batch", 1, prefix="hb", first_task=71000)
    handle = await populate(client, tmp_path / "batch", concurrency=1, wait=False)
    # Two model calls of 10 s each: the slice runs for about 20 s; watch 17 of them.
    seen = await _heartbeats_seen(handle, until_s=17.0)
    await asyncio.wait_for(handle.result(), 120)

    gaps = [(b - a).total_seconds() for a, b in zip(seen, seen[1:])]
    assert len(seen) >= 2, f"heartbeats the server recorded: {seen}"
    # A third of the timeout apart, as the activity beats; the SDK's default throttle gives 0.8 of it.
    limit = HEARTBEAT.total_seconds() * 0.6
    assert max(gaps) < limit, f"heartbeats reached the server {gaps} s apart (timeout {HEARTBEAT.total_seconds()} s)"
