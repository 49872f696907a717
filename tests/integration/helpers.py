from __future__ import annotations

import uuid
from pathlib import Path

from bamboo.accumulation.contract import PopulateInput
from workflows.populate import PopulateBatch
from bamboo.contract import Queue


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
