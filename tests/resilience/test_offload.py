"""`bamboo.offload` and the readers built on it: results and errors come back unchanged, a budget is
kept, and a large legal incident is read while the loop goes on answering."""

from __future__ import annotations

import json
import time

import pytest

from bamboo.models.incident import IncidentSource
from bamboo.ingest import IncidentRejected, read_incident, read_incident_off_loop
from bamboo.offload import BudgetExceeded, ChildFailed, in_child, in_thread
from tests.resilience.loop_lag import loop_lag


async def test_a_thread_returns_the_result_and_raises_the_error():
    assert await in_thread(sum, [1, 2, 3], budget_s=5, what="adding") == 6
    with pytest.raises(ZeroDivisionError):
        await in_thread(lambda: 1 / 0, budget_s=5, what="dividing")


async def test_a_thread_past_its_budget_is_reported_and_its_result_dropped():
    with pytest.raises(BudgetExceeded, match="sleeping took longer than 0.05 s"):
        await in_thread(time.sleep, 0.5, budget_s=0.05, what="sleeping")


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
