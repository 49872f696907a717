"""Cancelling a run or closing the runner at any moment of a child's start ends promptly and leaves nothing.

A Temporal activity is cancelled whenever its workflow is, and a worker closes its runner while the warm pool
refills; both land at arbitrary points of a child's start. Killed in the few milliseconds while bubblewrap sets
itself up, the sandboxed process outlived its parent, kept the run's pipes open, and the cancelled call then
waited for them for ever (and kept its uid lease, seccomp descriptor and socket pair)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.sandbox.conftest import harness, needs_bwrap, unique_limits, wait_until_gone

# From "before the child exists" to "after it said ready"; a start takes some tens of milliseconds here.
DELAYS_S = [0.0, 0.001, 0.002, 0.003, 0.005, 0.008, 0.012, 0.02, 0.03, 0.05, 0.08, 0.12]
# Far above a start (READY_TIMEOUT_S bounds one), far below "for ever".
SETTLE_S = 20.0


def _open_descriptors() -> set[str]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            found.add(f"{name} -> {os.readlink(f'/proc/self/fd/{name}')}")
        except OSError:
            continue
    return found


async def _descriptors_settled(before: set[str], seconds: float = 5.0) -> set[str]:
    """Descriptors opened since ``before`` that are still open (transports close on a later loop turn)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        extra = _open_descriptors() - before
        if not extra or asyncio.get_running_loop().time() > deadline:
            return extra
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "degraded"])
async def test_cancelling_a_run_while_its_child_starts_never_hangs_or_leaks(isolation):
    limits = unique_limits()
    async with harness(isolation, limits=limits, pool_size=0) as h:
        await h.run("return {'warm': 'up'}")  # imports and probes done once, so later counts compare like with like
        before = _open_descriptors()
        hung = []
        for delay in DELAYS_S * 2:
            run = asyncio.ensure_future(h.run("return {'n': 1}"))
            await asyncio.sleep(delay)
            run.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(run), SETTLE_S)
            except asyncio.CancelledError:
                pass
            except asyncio.TimeoutError:
                hung.append(delay)
        assert hung == [], f"a cancelled run did not end within {SETTLE_S} s when cancelled after {hung} s"
        assert await wait_until_gone(limits) == []
        assert await _descriptors_settled(before) == set()
        after = await h.run("return {'still': 'works'}")
        assert after.status == "ok" and after.return_value == {"still": "works"}


@pytest.mark.parametrize("isolation", [pytest.param("bwrap", marks=needs_bwrap), "degraded"])
async def test_closing_the_runner_while_the_pool_refills_ends_promptly(isolation):
    for delay in DELAYS_S:
        limits = unique_limits()
        closing = None
        async with harness(isolation, limits=limits, pool_size=1) as h:
            result = await h.run("return {'n': 1}")  # the pool refills in the background from here on
            assert result.status == "ok"
            await asyncio.sleep(delay)
            closing = asyncio.ensure_future(h.runner.close())
            done, _ = await asyncio.wait([closing], timeout=SETTLE_S)
            assert done, f"closing the runner {delay} s after a run did not end within {SETTLE_S} s"
        assert await wait_until_gone(limits) == []
