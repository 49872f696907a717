"""Batches started on older code must replay on today's code: operators upgrade workers while long
batches run. Recorded histories: the per-incident PopulateBatch from before lanes (3 incidents, one
bad), and a lane batch from before the end of a run was shared between the lanes (41 items, one bad,
concurrency 8, slices of 32: it scheduled 16 and 25 where today's code schedules 16 and 13); a lane batch
from before lanes claimed their slices and shared the budget with escalations (41 items, one bad,
concurrency 8, slices of 8: one activity per slice, the next started on `lane_released`); one
from today's claiming lanes (the same batch), so later changes must keep replaying it; and the first run
of a claiming batch whose history passed `max_history_events` (30) and continued as new (69 events)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch

HISTORIES = Path(__file__).parent / "histories"


async def _replay(name: str) -> None:
    history = WorkflowHistory.from_json("populate:replay", (HISTORIES / name).read_text())
    replayer = Replayer(workflows=[PopulateBatch, AccumulateIncident],
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


async def test_pre_lane_batch_history_replays_without_nondeterminism():
    await _replay("populate_per_incident_v1.json")


async def test_lane_batch_from_before_balanced_slices_replays_without_nondeterminism():
    await _replay("populate_lanes_v1.json")


async def test_lane_batch_from_before_slice_claims_replays_without_nondeterminism():
    await _replay("populate_lanes_v2.json")


async def test_claiming_lane_batch_replays_without_nondeterminism():
    await _replay("populate_lanes_v3.json")


async def test_a_run_that_continued_as_new_at_its_history_cap_replays_without_nondeterminism():
    await _replay("populate_lanes_v4.json")
