"""Heartbeat while awaiting slow work, so a worker that dies mid-call is noticed within the
heartbeat timeout instead of the (long) start-to-close timeout, and the call is retried elsewhere."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

from temporalio import activity

T = TypeVar("T")


async def with_heartbeats(work: Awaitable[T], every_s: float = 2.0, details: Callable[[], Any] | None = None) -> T:
    """`details`, when given, is called at each beat for the progress a retried attempt resumes from."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            if details is None:
                activity.heartbeat()
            else:
                activity.heartbeat(details())
    finally:
        if not task.done():
            task.cancel()
