"""Heartbeats reach the server well inside the heartbeat timeout. The SDK sends an activity's latest beat at
most every 0.8 x its heartbeat timeout unless the worker says otherwise: 8 s against 10 s, so a loaded machine
could make a live slice look dead and have its incidents redone."""

from __future__ import annotations

from temporalio import activity

from bamboo.contract import HEARTBEAT, HEARTBEAT_THROTTLE
from worker.main import polling_workers
from worker.registry import QueuePlan


@activity.defn(name="test-heartbeat-noop")
async def noop() -> None:
    return None


async def test_every_worker_sends_heartbeats_at_least_three_times_per_heartbeat_timeout(client):
    plans = [QueuePlan(queue=f"test-heartbeat-{q}", activities=[noop]) for q in "ab"]
    workers = polling_workers(client, plans, "test-worker")
    assert [w.task_queue for w in workers] == ["test-heartbeat-a", "test-heartbeat-b"]
    for w in workers:
        assert w.config()["max_heartbeat_throttle_interval"] == HEARTBEAT_THROTTLE
    assert 3 * HEARTBEAT_THROTTLE <= HEARTBEAT
