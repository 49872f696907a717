"""A batch started before lanes existed must replay on today's code: operators upgrade workers while
long batches run. The history was recorded from the per-incident PopulateBatch (3 incidents, one bad)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch

HISTORY = Path(__file__).parent / "histories" / "populate_per_incident_v1.json"


async def test_pre_lane_batch_history_replays_without_nondeterminism():
    history = WorkflowHistory.from_json("populate:replay", HISTORY.read_text())
    replayer = Replayer(workflows=[PopulateBatch, AccumulateIncident],
                        data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
