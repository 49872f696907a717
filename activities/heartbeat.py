"""The one heartbeat loop of the activities: heartbeat while awaiting slow work, so a worker that dies
mid-call is noticed within the heartbeat timeout instead of the (long) start-to-close timeout, and the
call is retried elsewhere; and when Temporal cancels the activity, the work is cancelled and allowed to
clean up (a sandbox run kills its child) before the cancellation propagates."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Awaitable, Callable, TypeVar

from temporalio import activity

T = TypeVar("T")
EVERY_S = 2.0
MIN_EVERY_S = 0.1


def beat_interval(every_s: float = EVERY_S) -> float:
    """`every_s`, but at most a third of the activity's heartbeat timeout: two beats may be lost or late
    before Temporal takes the worker for dead."""
    timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    if timeout is None:
        return every_s
    return max(MIN_EVERY_S, min(every_s, timeout.total_seconds() / 3))


async def with_heartbeats(work: Awaitable[T], every_s: float = EVERY_S, details: Callable[[], Any] | None = None) -> T:
    """`work`'s result, heartbeating every `beat_interval(every_s)` while it runs. `details`, when given, is
    called at each beat for what the heartbeat carries (the progress a retried attempt resumes from, or
    what a person reading the pending activity sees). Each beat replaces the details Temporal keeps, the
    previous attempt's included, whatever time has passed: a retried attempt may spend its first minutes
    waiting out a database outage with nothing settled. So an attempt that resumes from its predecessor's
    details returns them from `details` too, merged with its own progress, from its first beat on."""
    task = asyncio.ensure_future(work)
    interval = beat_interval(every_s)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if details is None:
                activity.heartbeat()
            else:
                activity.heartbeat(details())
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # its own cleanup runs before the cancellation (or failure) goes on
