"""Issue 28, finding 2: large legal incidents are learned like any other, and the worker stays responsive.

Two files under the 8 MiB limit (a task with a million-element array, one with 200k keys) took seconds
each to parse and check on the slice's event loop: heartbeats stopped, a slice exhausted its retries,
its incidents were escalated and their model calls paid again (3.7 calls per stored incident, not 2).
Here a batch holds two such files among small incidents while the batch's worker runs on this test's
event loop, beside a ticker: every incident is stored in its slice with two model calls, and the loop
never stalls.
"""

from __future__ import annotations

import asyncio
import json


from bamboo.accumulation.contract import PopulateResult
from bamboo.samples import generate_incidents, write_incidents
from tests.integration.helpers import populate
from tests.resilience.loop_lag import loop_lag

LOOP_BOUND_S = 1.0  # generous: a healthy loop answers within milliseconds
SMALL = 10


def large_legal_incidents(seed: int = 28) -> list[dict]:
    """Two incidents on the email path, each under 8 MiB and every bound, each seconds of parsing."""
    first, second = (i.model_copy(update={"resolution_record": None}).model_dump(mode="json")
                     for i in generate_incidents(2, seed=seed))
    first["incident_id"] = "large-array"
    first["task_data"]["jobMetrics"] = ["a"] * 1_500_000
    second["incident_id"] = "large-keys"
    second["task_data"].update({f"k{i:06d}": "v" for i in range(200_000)})
    return [first, second]


def write_large(incidents: list[dict], path) -> None:
    for doc in incidents:
        (path / f"{doc['incident_id']}.json").write_text(json.dumps(doc, separators=(",", ":")))


async def test_large_legal_incidents_cost_two_model_calls_and_never_stall_the_loop(client, running_worker, services,
                                                                                     llm_server, tmp_path):
    small = [i.model_copy(update={"resolution_record": None}) for i in generate_incidents(SMALL, seed=7)]
    write_incidents(small, tmp_path)
    write_large(large_legal_incidents(), tmp_path)

    async with loop_lag() as lag:
        result: PopulateResult = await asyncio.wait_for(populate(client, tmp_path, concurrency=4), 300)

    assert (result.done, result.failed, result.escalated) == (SMALL + 2, 0, 0), result.failures
    assert llm_server.call_count == 2 * (SMALL + 2), llm_server.counts_by_schema()
    assert lag.worst < LOOP_BOUND_S, f"the worker's event loop stalled for {lag.worst:.1f} s"
