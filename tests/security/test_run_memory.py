"""Item: memory is bounded per run, not per process (a forking script used to hold NPROC × RLIMIT_AS)."""

from __future__ import annotations

from tests.sandbox.conftest import harness, unique_limits, wait_until_gone

MiB = 1024 * 1024

# Four children each hold 96 MiB: every process stays far under its 256 MiB RLIMIT_AS, the run
# together holds ~400 MiB against a 160 MiB total.
FORK_AND_HOLD = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        blob = b"x" * (96 * 1024 * 1024)
        time.sleep(20)
        os._exit(0)
    kids.append(pid)
time.sleep(8)
return {"survived": True}
"""


async def test_a_forking_script_is_held_to_one_total(mode):
    limits = unique_limits(memory_bytes=256 * MiB, run_memory_bytes=160 * MiB, max_processes=512)
    async with harness(mode, limits=limits) as h:
        res = await h.run(FORK_AND_HOLD, timeout_s=15)
        assert res.status == "memory_limit", (res.status, res.error, res.return_value)
        assert "160 MiB" in res.error
        assert res.memory_guard == h.runner.memory_guard
        assert res.memory_guard in ("cgroup", "watchdog")
        assert await wait_until_gone(limits) == []


async def test_a_run_under_its_total_is_untouched_and_says_how_it_was_bounded(mode):
    limits = unique_limits(memory_bytes=256 * MiB, run_memory_bytes=160 * MiB)
    async with harness(mode, limits=limits) as h:
        res = await h.run("blob = b'x' * (48 * 1024 * 1024)\nreturn {'held': len(blob)}", timeout_s=15)
        assert res.status == "ok", res.error
        assert res.memory_guard == h.runner.memory_guard
        assert res.model_dump()["memory_guard"] in ("cgroup", "watchdog")


async def test_the_guard_is_the_cgroup_exactly_when_the_host_allows_one(mode):
    """Probe and result agree: a writable cgroup v2 hierarchy with the memory controller gives each run a
    leaf (the kernel enforces the total); anywhere else the watchdog applies, and the result says so."""
    from bamboo.sandbox.memory import CgroupParent

    expected = "cgroup" if CgroupParent.probe() is not None else "watchdog"
    limits = unique_limits(memory_bytes=256 * MiB, run_memory_bytes=160 * MiB, max_processes=512)
    async with harness(mode, limits=limits) as h:
        assert h.runner.memory_guard == expected
        res = await h.run(FORK_AND_HOLD, timeout_s=15)
    assert res.memory_guard == expected and res.status == "memory_limit"
