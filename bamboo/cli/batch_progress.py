"""One progress view for any batch workflow (populate, batch analyze), fed by its handle from the batch client
(`bamboo/batch/client.py`: its `progress` query, or what the batch's own client reads instead).

On a terminal it is a live bar whose last frame is the batch's final counts; elsewhere (a log file, CI, a
pipe) it is one plain line whenever the counts change, at most every few seconds, and a final line. The
batch lives in Temporal, not in this process: Ctrl-C only detaches the view.

Traced (``BAMBOO_OTEL_EXPORTER``), the polls make no spans: a poll every half second was 91% of all spans
of a long populate, each its own trace. Instead the command's span gets a ``batch.progress`` event when
the counts changed (at most every EVENT_EVERY_S), a ``batch.result`` event with the final counts, and the
number of polls as ``bamboo.progress_polls``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from temporalio.client import Client

from bamboo.batch.client import BatchHandle
from bamboo.cli.common import console
from bamboo.cli.worker_presence import no_worker_hint, queue_has_worker
from bamboo.telemetry import progress_event, set_command_attribute, untraced

PLAIN_EVERY_S = 5.0
EVENT_EVERY_S = 5.0
WORKER_CHECK_S = 5.0
WORKER_GRACE_S = 20.0


class _WorkerWatch:
    """Asks Temporal now and then whether a worker polls the queue; says it once per change. A worker
    that was just started has not polled yet, so the queue counts as unattended only after
    WORKER_GRACE_S without a poller."""

    def __init__(self, client: Client, queue: str) -> None:
        self.client, self.queue = client, queue
        self.checked_at = -WORKER_CHECK_S
        self.missing_since: float | None = None
        self.alive: bool = True

    async def present(self) -> bool:
        """Whether a worker polls the queue (a query would find no one to answer it otherwise)."""
        if time.monotonic() - self.checked_at >= WORKER_CHECK_S:
            self.checked_at = time.monotonic()
            seen = await queue_has_worker(self.client, self.queue)
            if seen is False:  # Temporal not saying (None) is not evidence of a missing worker
                self.missing_since = self.missing_since if self.missing_since is not None else time.monotonic()
            else:
                self.missing_since = None
        alive = self.missing_since is None or time.monotonic() - self.missing_since < WORKER_GRACE_S
        if alive != self.alive:
            console.print(f"[yellow]{no_worker_hint(self.queue)}[/]" if not alive
                          else f"a worker polls task queue {self.queue} again", highlight=False, soft_wrap=True)
        self.alive = alive
        return self.missing_since is None


def _counts(p: Any) -> dict[str, Any]:
    """The bar's counts from a progress or a result (which runs nothing)."""
    return {"total": p.total, "completed": p.done + p.failed + p.skipped, "failed": p.failed, "skipped": p.skipped,
            "running": getattr(p, "running", 0)}


def _line(name: str, c: dict[str, Any], state: str = "") -> str:
    total = "?" if c["total"] is None else c["total"]
    return (f"{name}: {c['completed']}/{total} settled, {c['failed']} failed, {c['skipped']} skipped, "
            f"{c['running']} running{(' ' + state) if state else ''}")


async def follow(batch: BatchHandle[Any, Any], reattach_hint: str, quiet: bool = False,
                 worker_queue: tuple[Client, str] | None = None) -> Any | None:
    """Poll until the batch ends and return its result; on Ctrl-C print how to re-attach and return None.

    The progress is what ``batch.progress()`` reads (a populate batch's adds its running slices). With
    `worker_queue` (the client and the batch's task queue) the view checks every WORKER_CHECK_S that a worker
    polls the queue and says so, once, when none does (and again when one is back).
    """
    watch = _WorkerWatch(*worker_queue) if worker_queue else None
    live = console.is_terminal and not quiet
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]} · running {task.fields[running]} {task.fields[state]}"),
                  TimeElapsedColumn(), console=console, disable=not live) as bar:
        task = bar.add_task(batch.id, total=None, failed=0, running=0, state="")
        last_line, last_at = "", 0.0
        last_event, last_event_at, polls = "", -EVENT_EVERY_S, 0
        try:
            while True:
                if not await batch.running():
                    break
                if watch is not None and not await watch.present():  # no worker answers queries either
                    bar.update(task, state="(no worker)" if not watch.alive else "(waiting for a worker)")
                    await asyncio.sleep(0.5)
                    continue
                try:
                    polls += 1
                    with untraced():
                        p = await batch.progress()
                except Exception:  # noqa: BLE001 — between continue-as-new runs the query may briefly fail
                    await asyncio.sleep(0.5)
                    continue
                state = "(paused)" if p.paused else "(cancelling)" if p.cancelled else ""
                counts = _counts(p)
                bar.update(task, total=counts["total"], completed=counts["completed"], failed=counts["failed"],
                           running=counts["running"], state=state)
                line = _line(batch.id, counts, state)
                if line != last_event and time.monotonic() - last_event_at >= EVENT_EVERY_S:
                    progress_event("batch.progress", {"batch": batch.id, **counts, "state": state})
                    last_event, last_event_at = line, time.monotonic()
                if not live and not quiet and line != last_line and time.monotonic() - last_at >= PLAIN_EVERY_S:
                    console.print(line, highlight=False, soft_wrap=True)
                    last_line, last_at = line, time.monotonic()
                await asyncio.sleep(0.5)
            result = await batch.result()
        except (KeyboardInterrupt, asyncio.CancelledError):
            set_command_attribute("bamboo.progress_polls", polls)
            console.print(f"\nDetached. The batch goes on; re-attach with [bold]{reattach_hint}[/]")
            return None
        final = {**_counts(result), "running": 0}
        set_command_attribute("bamboo.progress_polls", polls)
        progress_event("batch.result", {"batch": batch.id, **final,
                                        "cancelled": bool(getattr(result, "cancelled", False))})
        # The last frame is the result's, not the last poll's.
        bar.update(task, total=final["total"], completed=final["completed"], failed=final["failed"], running=0,
                   state="(cancelled)" if getattr(result, "cancelled", False) else "")
    if not live and not quiet:
        console.print(_line(batch.id, final, "(cancelled)" if getattr(result, "cancelled", False) else "done"),
                      highlight=False, soft_wrap=True)
    return result
