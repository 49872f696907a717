"""Heartbeat while awaiting slow work, so a worker that dies mid-call is noticed within the
heartbeat timeout instead of the (long) start-to-close timeout, and the call is retried elsewhere."""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

from temporalio import activity

T = TypeVar("T")


async def with_heartbeats(work: Awaitable[T], every_s: float = 2.0) -> T:
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
