"""End to end on the real dev server and Postgres: a small batch populates, twice, idempotently."""

from __future__ import annotations

import json
import uuid
from pathlib import Path


from bamboo.accumulation.contract import PopulateInput, PopulateResult
from workflows.populate import PopulateBatch
from bamboo.contract import Queue


def _incident(i: int) -> dict:
    return {
        "incident_id": f"inc-{i}",
        "task_data": {"jediTaskID": 40000000 + i, "status": "broken", "errorDialog": "reason=InsufficientMemory payload exceeded memory",
                      "processingType": "reco", "coreCount": 8, "ramCount": 2500, "prodSourceLabel": "managed",
                      "userName": "Some One", "splitRule": "nG=1,mF=1"},
        "resolution_record": {"cause": "Insufficient memory request", "resolution": "Increase ramCount",
                              "procedure": ["Check scout jobs maxPSS", "Compare maxPSS with ramCount"]},
    }


async def _populate(client, path: Path, batch: str, concurrency: int = 4, **extra) -> PopulateResult:
    return await client.execute_workflow(
        PopulateBatch.run, PopulateInput(batch_id=batch, path=str(path), concurrency=concurrency, continue_as_new_every=3,
                                         **extra),
        id=f"populate:{batch}", task_queue=Queue.MAIN, result_type=PopulateResult,
    )


async def test_small_batch_is_idempotent(client, running_worker, services, tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.json").write_text(json.dumps(_incident(i)))
    result = await _populate(client, tmp_path, f"b-{uuid.uuid4().hex[:6]}")
    assert (result.done, result.failed) == (5, 0), result.failures
    counts = await services.store.knowledge.row_counts()
    assert counts["graphs"] == 5
    edges = await services.store.knowledge.edges_for_graph("panda:40000001:broken")
    assert ("Symptom", "InsufficientMemory", "indicate", "Cause", "Insufficient memory request") in edges
    assert ("Cause", "Insufficient memory request", "solved_by", "Resolution", "Increase ramCount") in edges
    again = await _populate(client, tmp_path, f"b-{uuid.uuid4().hex[:6]}", relearn=True)
    assert (again.done, again.skipped) == (5, 0)
    assert await services.store.knowledge.row_counts() == counts
