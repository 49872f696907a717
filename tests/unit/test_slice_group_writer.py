"""A slice's group writer, with a scripted strategy and storer so the order of events is exact.

What the writer must guarantee: an incident past the LLM is always written (no writer may be left
waiting for), groups gather while incidents are still on their way through the LLM, and the last
group is written at once instead of sitting out the gathering window.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from bamboo.accumulation.slice_learner import SliceLearner
from bamboo.accumulation.storing import StoreRequest
from bamboo.extraction.base import ExtractionResult
from bamboo.models.incident import IncidentSource
from bamboo.models.graph import GraphNode, KnowledgeGraph, WriteStats

# A graph the hard checks pass; a "resolution_record" source is approved without an LLM review.
APPROVED = ExtractionResult(
    graph=KnowledgeGraph(nodes=[GraphNode(kind="Symptom", name="WalltimeExceeded"),
                                GraphNode(kind="Cause", name="walltime too short"),
                                GraphNode(kind="Procedure", name="compare walltime with the job's runtime")]),
    source="resolution_record")


class ScriptedStrategy:
    """Extraction that waits for the test's go for each incident (by index in its id)."""

    name = "scripted"

    def __init__(self, n: int) -> None:
        self.go = [asyncio.Event() for _ in range(n)]

    def prefetch_hints(self, incident) -> dict:
        return {}

    async def extract(self, incident) -> ExtractionResult:
        await self.go[int(incident.incident_id.split("-")[1])].wait()
        return APPROVED


class RecordingStorer:
    """Records group sizes; a group's write may be held until the test lets it finish."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.writing = asyncio.Event()
        self.finish = asyncio.Event()
        self.finish.set()

    async def store_many(self, requests: list[StoreRequest]) -> list[WriteStats]:
        self.groups.append([r.graph.incident_id for r in requests])
        self.writing.set()
        await self.finish.wait()
        return [WriteStats(graph_id=r.graph.graph_id, nodes=3, edges=0, passages=0) for r in requests]


def _sources(tmp_path: Path, n: int) -> list[tuple[int, IncidentSource]]:
    out = []
    for i in range(n):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps({"incident_id": f"unit-{i}", "task_data": {"jediTaskID": 1000 + i, "status": "failed"},
                                    "email_text": "resolved"}))
        out.append((i, IncidentSource(path=str(path))))
    return out


def _learner(strategy: ScriptedStrategy, storer: RecordingStorer, **kw) -> SliceLearner:
    return SliceLearner(strategy, llm=None, storer=storer, **kw)  # type: ignore[arg-type]


async def test_an_incident_joining_as_the_writer_finishes_is_still_written(tmp_path):
    """The writer finds nothing waiting and ends in the same loop pass in which the next incident
    leaves the LLM. Had the writer left its place only in a later pass, that incident would find the
    place taken, start no writer, and the slice would wait for it forever."""
    strategy, storer = ScriptedStrategy(2), RecordingStorer()
    storer.finish.clear()
    learner = _learner(strategy, storer, parallelism=2, gather_s=0)

    async def second_incident_after_the_writer_waits():
        # Item 1 must wake after the writer in the same pass: it starts waiting on `finish` after it.
        await storer.writing.wait()
        await storer.finish.wait()
        strategy.go[1].set()

    run = asyncio.create_task(learner.run(_sources(tmp_path, 2), run_id="r", scope="k"))
    helper = asyncio.create_task(second_incident_after_the_writer_waits())
    strategy.go[0].set()
    await storer.writing.wait()
    storer.finish.set()
    outcomes = await asyncio.wait_for(run, 5)
    await helper
    assert [o.status for o in outcomes] == ["stored", "stored"]
    assert storer.groups == [["unit-0"], ["unit-1"]]


async def test_a_group_gathers_while_incidents_are_before_the_llm_and_the_last_one_is_written_at_once(tmp_path):
    strategy, storer = ScriptedStrategy(3), RecordingStorer()
    learner = _learner(strategy, storer, parallelism=3, gather_s=30)
    run = asyncio.create_task(learner.run(_sources(tmp_path, 3), run_id="r", scope="k"))
    started = time.monotonic()
    for go in strategy.go:
        go.set()
        await asyncio.sleep(0.01)
    outcomes = await asyncio.wait_for(run, 10)
    assert [o.status for o in outcomes] == ["stored"] * 3
    assert [sorted(g) for g in storer.groups] == [["unit-0", "unit-1", "unit-2"]], \
        "one group for incidents within the window"
    assert time.monotonic() - started < 10, "the last group did not sit out the 30 s window"


async def test_a_full_group_is_written_without_waiting_for_the_window(tmp_path):
    strategy, storer = ScriptedStrategy(3), RecordingStorer()
    learner = _learner(strategy, storer, parallelism=3, gather_s=30, max_group=2)
    run = asyncio.create_task(learner.run(_sources(tmp_path, 3), run_id="r", scope="k"))
    strategy.go[0].set()
    strategy.go[1].set()
    await asyncio.wait_for(storer.writing.wait(), 10)
    # The two finish in either order (each incident is read in the offload pool); the group holds both.
    assert [sorted(g) for g in storer.groups] == [["unit-0", "unit-1"]], \
        "a full group goes while an incident is still before the LLM"
    strategy.go[2].set()
    await asyncio.wait_for(run, 10)
    assert [sorted(g) for g in storer.groups] == [["unit-0", "unit-1"], ["unit-2"]]
