"""A ticker on the event loop: how long the loop went without running it is how long every other
activity of the worker (heartbeats included) waited."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

TICK_S = 0.01


@dataclass
class LoopLag:
    gaps: list[float] = field(default_factory=list)

    @property
    def worst(self) -> float:
        return max(self.gaps, default=0.0)


@contextlib.asynccontextmanager
async def loop_lag() -> AsyncIterator[LoopLag]:
    lag = LoopLag()

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            lag.gaps.append(now - last - TICK_S)
            last = now

    task = asyncio.create_task(tick())
    try:
        yield lag
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def max_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)
