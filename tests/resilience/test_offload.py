"""`bamboo.offload` and the readers built on it: results and errors come back unchanged, a budget is
kept, and a large legal incident is read while the loop goes on answering."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from bamboo import offload
from bamboo.models.incident import IncidentSource
from bamboo.ingest import IncidentRejected, read_incident, read_incident_off_loop
from bamboo.offload import BudgetExceeded, ChildFailed, OffloadBusy, in_child, in_thread
from tests.resilience.loop_lag import loop_lag


async def test_a_thread_returns_the_result_and_raises_the_error():
    assert await in_thread(sum, [1, 2, 3], budget_s=5, what="adding") == 6
    with pytest.raises(ZeroDivisionError):
        await in_thread(lambda: 1 / 0, budget_s=5, what="dividing")


async def test_a_thread_past_its_budget_is_reported_and_its_result_dropped():
    with pytest.raises(BudgetExceeded, match="sleeping took longer than 0.05 s"):
        await in_thread(time.sleep, 0.5, budget_s=0.05, what="sleeping")


async def _until(condition, what: str) -> None:
    """Wait (on the loop) until ``condition()`` holds: threads of earlier tests end in their own time."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def _settled() -> None:
    await _until(lambda: offload._alive == 0, "the offload threads ended")


async def test_runaways_past_their_budgets_do_not_fail_an_unrelated_job():
    """The review's t_budget.py: two runaways spent their 0.1 s budgets and kept both threads of the pool;
    a 1 ms job with a 1 s budget then failed with BudgetExceeded, waiting behind them. It must succeed."""
    release = threading.Event()
    try:
        for _ in range(2):
            with pytest.raises(BudgetExceeded, match="runaway took longer"):
                await in_thread(release.wait, 60, budget_s=0.1, what="runaway")
        assert await in_thread(sum, [1, 2], budget_s=1.0, what="tiny job") == 3
    finally:
        release.set()


async def test_the_budget_counts_from_when_the_job_starts_not_its_wait_in_the_queue():
    await _settled()
    release = threading.Event()
    holding: list[int] = []

    def hold() -> bool:
        holding.append(1)
        return release.wait(60)

    held = [asyncio.ensure_future(in_thread(hold, budget_s=120, what="holding")) for _ in range(2)]
    try:
        await _until(lambda: len(holding) == 2, "both threads hold a job")
        tiny = asyncio.ensure_future(in_thread(sum, [1, 2], budget_s=0.2, what="tiny job"))
        await asyncio.sleep(0.6)  # three times its budget, all of it spent waiting for a thread
        assert not tiny.done(), "the job's budget ran out while it waited in the queue"
    finally:
        release.set()
    assert await tiny == 3
    assert await asyncio.gather(*held) == [True, True]


async def test_when_runaways_hold_every_thread_new_work_fails_at_once_and_the_pool_recovers(monkeypatch):
    await _settled()
    monkeypatch.setattr(offload, "_MAX_THREADS", offload._POOL_THREADS + 1)
    release = threading.Event()
    ran: list[int] = []
    try:
        for _ in range(offload._POOL_THREADS + 1):
            with pytest.raises(BudgetExceeded):
                await in_thread(release.wait, 60, budget_s=0.05, what="runaway")
        with pytest.raises(OffloadBusy, match="tiny job was not started: all 3 threads of the offload pool"):
            await in_thread(ran.append, 1, budget_s=30, what="tiny job")
        assert ran == [], "work refused as busy must not run later either"
    finally:
        release.set()
    await _settled()  # the runaways end, and their threads serve again
    assert await in_thread(sum, [1, 2], budget_s=30, what="after") == 3


async def test_queued_work_is_refused_when_no_thread_is_left_to_take_it(monkeypatch):
    await _settled()
    monkeypatch.setattr(offload, "_MAX_THREADS", offload._POOL_THREADS)  # no replacement threads at all
    release = threading.Event()
    ran: list[int] = []
    try:
        runaways = [asyncio.ensure_future(in_thread(release.wait, 60, budget_s=0.3, what="runaway"))
                    for _ in range(offload._POOL_THREADS)]
        queued = asyncio.ensure_future(in_thread(ran.append, 1, budget_s=30, what="queued job"))
        with pytest.raises(OffloadBusy, match="queued job was not started"):
            await queued
        for runaway in runaways:
            with pytest.raises(BudgetExceeded):
                await runaway
    finally:
        release.set()
    await _settled()
    assert ran == []


async def test_a_child_runs_only_the_jobs_it_names():
    with pytest.raises(ChildFailed, match="no such job"):
        await in_child("os.system", b"", budget_s=30, what="anything")


async def test_a_large_legal_incident_is_read_while_the_loop_keeps_answering(tmp_path):
    doc = {"incident_id": "large", "email_text": "resolved",
           "task_data": {"jediTaskID": 7, "status": "broken", "jobMetrics": ["a"] * 1_500_000}}
    path = tmp_path / "large.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    async with loop_lag() as lag:
        read = await read_incident_off_loop(IncidentSource(path=str(path)))
    assert read == read_incident(IncidentSource(path=str(path)))
    assert lag.worst < 1.0, f"the event loop stalled for {lag.worst:.1f} s"


async def test_a_bad_file_is_still_its_own_reason_off_the_loop(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"incident_id": "x", "email_text": "e", "task_data": {"status": "' + "x" * 100 + '"}}')
    with pytest.raises(IncidentRejected, match="over the 64-character limit"):
        await read_incident_off_loop(IncidentSource(path=str(path)))
