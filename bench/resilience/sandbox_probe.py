"""Small sandbox runs alone, then beside a neighbour whose output is megabytes of secret-shaped lines,
all through one `execute_code` activity object on one event loop (one worker). Prints one JSON object.

Run by `bench.resilience.run` as a script in a child interpreter, with this tree first on the module path,
so the probe's loop is a worker's loop of its own and not the benchmark's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import sys
import time
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.contract import ExecuteCodeInput
from bamboo.sandbox.runner import SandboxRunner
from tests.sandbox.conftest import MemoryToolCaller, unique_limits

SMALL = "return {'n': 1}"
# About 4 MiB a stream (under the capture cap): seconds of scrubbing for `aws key=` lines.
NOISY = (
    "import sys\n"
    "chunk = ('aws key=' * 10 + '\\n') * 1000\n"
    "for _ in range(50):\n"
    "    sys.stdout.write(chunk)\n"
    "    sys.stderr.write(chunk)\n"
    "return {'printed': True}\n"
)
TICK_S = 0.01


@contextlib.asynccontextmanager
async def worst_loop_gap():
    gaps = [0.0]

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            gaps.append(now - last - TICK_S)
            last = now

    task = asyncio.create_task(tick())
    try:
        yield gaps
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def environment(beats: list[float] | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=10))
    if beats is not None:
        env.on_heartbeat = lambda *_: beats.append(time.monotonic())
    return env


async def small_runs(acts: SandboxActivities, seconds: float, at_least: int, tag: str) -> list[float]:
    env, latencies = environment(), []
    started = time.monotonic()
    while time.monotonic() - started < seconds or len(latencies) < at_least:
        t0 = time.perf_counter()
        out = await env.run(acts.execute_code, ExecuteCodeInput(run_id=f"{tag}-{len(latencies)}", code=SMALL,
                                                                timeout_s=60, phase="interactive"))
        if out.status != "ok":
            raise SystemExit(f"a small run failed: {out.status} {out.error}")
        latencies.append(time.perf_counter() - t0)
    return latencies


async def main(seconds: float, at_least: int) -> dict:
    runner = SandboxRunner(isolation="bwrap" if shutil.which("bwrap") else "degraded", limits=unique_limits())
    acts = SandboxActivities(runner=runner, caller=MemoryToolCaller(), audit=MemoryAuditSink(), blobs=MemoryBlobSink())
    try:
        await small_runs(acts, 0, 3, "warm")  # the pool's first children are not part of either figure
        async with worst_loop_gap() as gaps:
            alone = await small_runs(acts, seconds, at_least, "alone")
        alone_gap = max(gaps)
        beats: list[float] = []
        noisy_done = [0]

        async def neighbour() -> None:
            env = environment(beats)
            while True:
                out = await env.run(acts.execute_code, ExecuteCodeInput(
                    run_id=f"noisy-{noisy_done[0]}", code=NOISY, timeout_s=120, phase="interactive"))
                if out.status != "ok":
                    raise SystemExit(f"the noisy run failed: {out.status} {out.error}")
                noisy_done[0] += 1

        noisy = asyncio.create_task(neighbour())
        await asyncio.sleep(1.0)  # the neighbour is printing
        async with worst_loop_gap() as gaps:
            beside = await small_runs(acts, seconds, at_least, "beside")
            while noisy_done[0] < 1 and not noisy.done():  # at least one whole neighbour run is inside
                await asyncio.sleep(0.1)
        beside_gap = max(gaps)
        noisy.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await noisy
    finally:
        await runner.close()
    heartbeat_gap = max((b - a for a, b in zip(beats, beats[1:])), default=0.0)
    return {"alone": alone, "beside": beside, "alone_loop_gap_s": alone_gap, "beside_loop_gap_s": beside_gap,
            "neighbour_runs": noisy_done[0], "neighbour_heartbeat_gap_s": heartbeat_gap,
            "isolation": runner.isolation}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(float(sys.argv[1]), int(sys.argv[2])))))
