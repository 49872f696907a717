"""One live progress bar for any batch workflow (populate, batch analyze) fed by its `progress` query.

The batch lives in Temporal, not in this process: Ctrl-C only detaches the view.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from temporalio.client import WorkflowHandle

from bamboo.cli.common import console


async def follow_batch(handle: WorkflowHandle, progress_type: type, reattach_hint: str, quiet: bool = False) -> Any | None:
    """Poll until the batch ends and return its result; on Ctrl-C print how to re-attach and return None.

    `progress_type` is any model with total, done, failed, running, paused and cancelled fields.
    """
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]} · running {task.fields[running]} {task.fields[state]}"),
                  TimeElapsedColumn(), console=console, disable=quiet) as bar:
        task = bar.add_task(handle.id, total=None, failed=0, running=0, state="")
        try:
            while True:
                desc = await handle.describe()
                if desc.status is not None and desc.status.name != "RUNNING":
                    break
                try:
                    p = await handle.query("progress", result_type=progress_type)
                except Exception:  # noqa: BLE001 — between continue-as-new runs the query may briefly fail
                    await asyncio.sleep(0.5)
                    continue
                state = "(paused)" if p.paused else "(cancelling)" if p.cancelled else ""
                bar.update(task, total=p.total, completed=p.done + p.failed + getattr(p, "skipped", 0),
                           failed=p.failed, running=p.running, state=state)
                await asyncio.sleep(0.5)
        except (KeyboardInterrupt, asyncio.CancelledError):
            console.print(f"\nDetached. The batch goes on; re-attach with [bold]{reattach_hint}[/]")
            return None
    return await handle.result()
