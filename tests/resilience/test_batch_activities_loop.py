"""The batch activities keep the worker's loop free and a retried slice's progress whole.

Populate's listing (`list_incident_sources`) lists and encodes the batch in the offload pool within a budget,
and a parked listing (populate's and analyze-batch's) is fetched and split off the loop once per worker,
not once per page. A retried `learn_slice` heartbeats the dead attempt's outcomes from its first beat, so a
further crash resumes from them and the live progress never falls back. Structural checks only (which thread
ran what, what a spy saw, what each heartbeat carried), never wall time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
import types
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import accumulate, analyze
from activities.accumulate import AccumulateActivities
from activities.analyze import AnalyzeActivities
from bamboo.accumulation.contract import ItemOutcome, SliceHeartbeat, SliceInput, SourcePageInput
from bamboo.analysis.contract import TaskPageInput, TaskSource
from bamboo.models.incident import IncidentSource
from bamboo.offload import BudgetExceeded

INCIDENT = {"incident_id": "x", "task_data": {"jediTaskID": 1, "status": "failed"}}


class Blobs:
    """A content-addressed blob store in memory that counts its reads."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.gets = 0

    async def put(self, raw: bytes) -> str:
        ref = hashlib.sha256(raw).hexdigest()
        self.data[ref] = raw
        return ref

    async def get(self, ref: str) -> bytes:
        self.gets += 1
        return self.data[ref]


def _accumulate(blobs: Blobs, knowledge: Any = None) -> AccumulateActivities:
    store = types.SimpleNamespace(blobs=blobs, knowledge=knowledge)
    services = types.SimpleNamespace(store=store, embedder=None, strategy=None, llm=None,
                                     settings=types.SimpleNamespace(canonical_match_threshold=0.9))
    return AccumulateActivities(services)  # type: ignore[arg-type]


def _spy_in_thread(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """Record what `module` hands to `in_thread` (each with a budget), then run it there for real."""
    offloaded: list[str] = []
    real = module.in_thread

    async def spy(fn: Callable[..., Any], *args: Any, budget_s: float, what: str) -> Any:
        assert budget_s > 0
        offloaded.append(what)
        return await real(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(module, "in_thread", spy)
    return offloaded


def _incident_dir(tmp_path: Path, n: int) -> Path:
    d = tmp_path / "incidents"
    d.mkdir()
    for i in range(n):
        (d / f"{i:03d}.json").write_text(json.dumps({**INCIDENT, "incident_id": f"i-{i}"}))
    return d


# --- populate's listing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["directory", "jsonl"])
async def test_the_incident_listing_is_listed_and_encoded_off_the_loop(kind: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "directory":
        path = _incident_dir(tmp_path, 5)
    else:
        path = tmp_path / "incidents.jsonl"
        path.write_text("".join(json.dumps({**INCIDENT, "incident_id": f"i-{i}"}) + "\n" for i in range(5)))
    offloaded = _spy_in_thread(monkeypatch, accumulate)
    listed_on: list[int] = []
    real_list = accumulate.list_sources

    def list_spy(p: str) -> list[IncidentSource]:
        listed_on.append(threading.get_ident())
        return real_list(p)

    monkeypatch.setattr(accumulate, "list_sources", list_spy)
    blobs = Blobs()
    acts = _accumulate(blobs)
    listing = await ActivityEnvironment().run(acts.list_incident_sources, str(path))

    assert listed_on and threading.get_ident() not in listed_on, "the batch was listed on the event loop"
    assert "listing the incidents" in offloaded
    assert listing.total == 5
    expected = real_list(str(path))
    assert blobs.data[listing.ref] == "\n".join(s.model_dump_json(exclude_none=True) for s in expected).encode()


async def test_a_listing_past_its_budget_fails_the_listing_with_the_reason(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async def too_slow(fn: Callable[..., Any], *args: Any, budget_s: float, what: str) -> Any:
        raise BudgetExceeded(f"{what} took longer than {budget_s:g} s")

    monkeypatch.setattr(accumulate, "in_thread", too_slow)
    with pytest.raises(ApplicationError, match="listing the incidents took longer than") as caught:
        await ActivityEnvironment().run(_accumulate(Blobs()).list_incident_sources, str(_incident_dir(tmp_path, 2)))
    assert caught.value.non_retryable and caught.value.type == "SourceListingError"


async def test_a_parked_incident_listing_is_split_off_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [IncidentSource(path=f"/data/inc-{i}.json") for i in range(25)]
    blobs = Blobs()
    ref = await blobs.put("\n".join(s.model_dump_json(exclude_none=True) for s in sources).encode())
    offloaded = _spy_in_thread(monkeypatch, accumulate)
    acts = _accumulate(blobs)
    env = ActivityEnvironment()
    pages = [await env.run(acts.read_incident_sources, SourcePageInput(ref=ref, offset=o, limit=10)) for o in (0, 10, 20)]

    assert [s for page in pages for s in page] == sources
    assert offloaded == ["splitting the incident listing"], "the listing was not split (once) in the offload pool"
    assert blobs.gets == 1


# --- a retried slice ---------------------------------------------------------------------------------------


async def test_a_retried_slice_heartbeats_the_dead_attempts_outcomes_from_its_first_beat() -> None:
    """Attempt 2 looks up what attempt 1 stored while the database is down (heartbeating meanwhile); then its
    worker dies too. Every beat it sent holds attempt 1's escalated outcomes, so attempt 3 resumes from them."""
    sources = [IncidentSource(path=f"/data/inc-{i}.json") for i in range(8)]
    blobs = Blobs()
    ref = await blobs.put("\n".join(s.model_dump_json(exclude_none=True) for s in sources).encode())
    previous = SliceHeartbeat(outcomes=[
        ItemOutcome(index=i, status="escalated", reason="review rejected: x", source=sources[i], prior_ref=f"blob-{i}")
        for i in range(6)
    ]).model_dump(mode="json", exclude_none=True)
    beats: list[dict[str, Any]] = []
    beaten = asyncio.Event()

    def on_heartbeat(*details: Any) -> None:
        beats.append(details[0])
        if len(beats) >= 2:
            beaten.set()

    class Knowledge:
        async def stored_graphs(self, scope: str, labels: list[str]) -> dict[str, Any]:
            await asyncio.wait_for(beaten.wait(), 60)  # the outage lasts a few beats ...
            raise RuntimeError("the worker died")  # ... then this attempt is lost as well

        async def learned_contents(self, hashes: list[str]) -> set[str]:
            return set()

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[previous],
                                   heartbeat_timeout=timedelta(seconds=0.3), workflow_id="populate:b")
    env.on_heartbeat = on_heartbeat
    acts = _accumulate(blobs, Knowledge())
    with pytest.raises(RuntimeError, match="the worker died"):
        await env.run(acts.learn_slice, SliceInput(batch_id="b", listing_ref=ref, offset=0, count=8, parallelism=2,
                                                   store_scope="populate:b"))

    assert len(beats) >= 2
    for beat in beats:
        assert beat == previous, "a beat of the retried attempt dropped the outcomes it resumed from"


# --- analyze-batch's listing -------------------------------------------------------------------------------


def _analyze(blobs: Blobs) -> AnalyzeActivities:
    return AnalyzeActivities(analysis=None, llm=None, blobs=blobs, meter=None)  # type: ignore[arg-type]


async def test_task_pages_split_the_listing_off_the_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [TaskSource(path=f"/tasks/{i}.json", task_id=100 + i, status="failed") for i in range(25)]
    blobs = Blobs()
    ref = await blobs.put("\n".join(t.model_dump_json() for t in tasks).encode())
    empty = await blobs.put(b"")
    offloaded = _spy_in_thread(monkeypatch, analyze)
    acts = _analyze(blobs)
    env = ActivityEnvironment()
    pages = [await env.run(acts.read_tasks, TaskPageInput(ref=ref, offset=o, limit=10)) for o in (0, 10, 20, 30)]

    assert [t for page in pages for t in page] == tasks and pages[-1] == []
    assert offloaded == ["splitting the task listing"], "every page split the listing, or split it on the loop"
    assert blobs.gets == 1
    assert await env.run(acts.read_tasks, TaskPageInput(ref=empty, offset=0, limit=10)) == []


async def test_only_the_last_few_task_listings_are_kept() -> None:
    blobs = Blobs()
    acts = _analyze(blobs)
    env = ActivityEnvironment()
    refs = [await blobs.put(TaskSource(path=f"/t/{i}.json", task_id=1 + i, status="failed").model_dump_json().encode())
            for i in range(analyze.KEPT_LISTINGS + 2)]
    for ref in refs:
        [task] = await env.run(acts.read_tasks, TaskPageInput(ref=ref, offset=0, limit=10))
    assert list(acts._listings) == refs[-analyze.KEPT_LISTINGS:]
    await env.run(acts.read_tasks, TaskPageInput(ref=refs[-1], offset=0, limit=10))
    assert blobs.gets == len(refs)
