"""Issue 28, finding 1: a run that prints megabytes of secret-shaped text does not stop the worker.

Its output used to be scrubbed on the event loop: 4 MiB a stream of ``aws key=`` lines was seconds of
CPU with no heartbeat, so Temporal retried the activity (the script ran again) and every other activity
of the worker waited. Here the real ``execute_code`` activity runs such a script in the real sandbox,
beside a loop ticker and a stream of small runs on the same loop: the loop never stalls, heartbeats keep
their rhythm, the small runs finish, and the big run's output comes back scrubbed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.contract import ExecuteCodeInput
from bamboo.sandbox.runner import SandboxRunner
from tests.resilience.loop_lag import loop_lag, max_gap
from tests.sandbox.conftest import HAS_BWRAP, MemoryToolCaller, unique_limits

ISOLATION = "bwrap" if HAS_BWRAP else "degraded"
# Just under the 4 MiB capture cap per stream, so the run ends normally and all of it is scrubbed.
NOISY = (
    "import sys\n"
    "chunk = ('aws key=' * 10 + '\\n') * 1000\n"
    "for _ in range(50):\n"
    "    sys.stdout.write(chunk)\n"
    "    sys.stderr.write(chunk)\n"
    "return {'printed': True}\n"
)
SMALL = "return {'n': 1}"
LOOP_BOUND_S = 1.0  # generous: a healthy loop answers within milliseconds
HEARTBEAT_TIMEOUT_S = 3.0  # the activity beats every second


async def test_megabytes_of_secret_shaped_output_do_not_stall_the_worker():
    runner = SandboxRunner(isolation=ISOLATION, limits=unique_limits())
    acts = SandboxActivities(runner=runner, caller=MemoryToolCaller(), audit=MemoryAuditSink(), blobs=MemoryBlobSink())
    beats: list[float] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *_: beats.append(time.monotonic())
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=HEARTBEAT_TIMEOUT_S))
    small_env = ActivityEnvironment()
    small_env.info = env.info

    def run(env: ActivityEnvironment, run_id: str, code: str):
        return env.run(acts.execute_code, ExecuteCodeInput(run_id=run_id, code=code, timeout_s=60,
                                                           phase="interactive"))

    try:
        async with loop_lag() as lag:
            big = asyncio.create_task(run(env, "noisy", NOISY))
            small = []
            while not big.done():
                small.append(await run(small_env, f"small-{len(small)}", SMALL))
                await asyncio.sleep(0.2)
            result = await big
    finally:
        await runner.close()

    assert result.status == "ok", result.error
    assert result.stdout.total_bytes > 3_000_000 and result.stderr.total_bytes > 3_000_000
    assert result.stdout.preview.startswith("aws key="), "scrubbed and shown, not withheld"
    assert lag.worst < LOOP_BOUND_S, f"the event loop stalled for {lag.worst:.1f} s"
    assert max_gap(beats) < HEARTBEAT_TIMEOUT_S, f"heartbeats stopped for {max_gap(beats):.1f} s"
    assert small and all(r.status == "ok" for r in small)
