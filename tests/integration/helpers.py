from __future__ import annotations

import json
import uuid
from pathlib import Path

from bamboo.accumulation.contract import PopulateInput
from workflows.populate import PopulateBatch
from bamboo.contract import Queue

# An e-mail-path incident the scripted model learns in two calls (extraction, review); tests differ in ids only.
WALLTIME_TASK = {"status": "failed", "errorDialog": "reason=WalltimeExceeded job hit limit", "processingType": "simul",
                 "coreCount": 1}
WALLTIME_EMAIL = ("From: shifter\nThe jobs failed due to too short walltime for the simulation step. "
                  "We increased the walltime and resubmitted.")


def write_incidents(directory: Path, n: int, *, prefix: str, first_task: int, start: int = 0) -> Path:
    """`n` incident files numbered from `start` in `directory` (created), with task ids from `first_task`."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + n):
        (directory / f"{i:03d}.json").write_text(json.dumps(
            {"incident_id": f"{prefix}-{i}", "task_data": {**WALLTIME_TASK, "jediTaskID": first_task + i},
             "email_text": WALLTIME_EMAIL}))
    return directory


async def populate(client, path: Path, *, concurrency: int = 8, every: int = 50, batch: str | None = None,
                   paused: bool = False, wait: bool = True, **extra):
    bid = batch or f"b-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        PopulateBatch.run,
        PopulateInput(batch_id=bid, path=str(path), concurrency=concurrency, continue_as_new_every=every, paused=paused,
                      **extra),
        id=f"populate:{bid}", task_queue=Queue.MAIN,
    )
    if not wait:
        return handle
    return await handle.result()
