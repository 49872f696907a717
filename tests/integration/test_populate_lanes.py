"""The populate lanes on the real stack: the happy path stays in one activity per slice, anything
else is escalated to its own AccumulateIncident workflow (visible and retried there), a lane
retried after its worker vanished resumes from its heartbeated outcomes, and the per-incident mode
still works for operators who want every step in Temporal Web."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from bamboo.accumulation.lane import AccumulationLane
from bamboo.accumulation.storing import GraphStorer
from bamboo.ingest import list_sources
from bamboo.models.accumulate import ItemOutcome, PopulateInput, PopulateResult
from tests.support.answers import accumulation_handler, reject
from tests.support.scripted_llm import Reply, schema_router
from workflows.populate import PopulateBatch
from bamboo.contract import Queue

pytestmark = pytest.mark.integration

TASK = {"status": "failed", "errorDialog": "reason=WalltimeExceeded job hit limit", "processingType": "simul",
        "coreCount": 1}
EMAIL = ("From: shifter\nThe jobs failed due to too short walltime for the simulation step. "
         "We increased the walltime and resubmitted.")


def _write(tmp_path: Path, n: int, *, bad: int = 0) -> Path:
    d = tmp_path / "incidents"
    d.mkdir()
    for i in range(n):
        (d / f"{i:03d}.json").write_text(json.dumps(
            {"incident_id": f"lane-{i}", "task_data": {**TASK, "jediTaskID": 41000000 + i}, "email_text": EMAIL}))
    for i in range(bad):
        (d / f"bad-{i}.json").write_text("{ not json")
    return d


async def _start(client, path: Path, **extra):
    bid = f"lanes-{uuid.uuid4().hex[:8]}"
    return await client.start_workflow(
        PopulateBatch.run, PopulateInput(batch_id=bid, path=str(path), **extra),
        id=f"populate:{bid}", task_queue=Queue.MAIN, result_type=PopulateResult,
    )


async def _populate(client, path: Path, **extra) -> PopulateResult:
    return await (await _start(client, path, **extra)).result()


async def _graph_rows(services) -> int:
    return (await services.store.knowledge.stats()).graphs


async def test_happy_path_stays_in_lanes_and_bad_input_fails_its_item(client, running_worker, services, llm_server,
                                                                    tmp_path):
    path = _write(tmp_path, 12, bad=1)
    result = await _populate(client, path, concurrency=4, chunk_size=5)
    assert (result.done, result.failed, result.escalated) == (12, 1, 0), result.failures
    assert "bad-0.json" in result.failures[0].source and "JSON" in result.failures[0].reason
    assert await _graph_rows(services) == 12
    # two LLM calls per incident, none spent on child workflows
    assert llm_server.counts_by_schema() == {"email_extraction": 12, "review_verdict": 12}
    audit = await services.store.audit.tail(100)
    assert sum(1 for row in audit if row["kind"] == "graph_stored") == 12


async def test_rejected_incidents_escalate_to_their_own_workflow(client, running_worker, services, llm_server, tmp_path):
    plan = {"code": "return {'checked': 'walltime'}", "capability_gaps": []}
    llm_server.handler = schema_router({"analysis_exploration_code": lambda r: plan},
                                       default=accumulation_handler(review=reject))
    path = _write(tmp_path, 3)
    result = await _populate(client, path, concurrency=4, max_review_retries=1)
    assert (result.done, result.failed, result.escalated) == (3, 0, 3), result.failures
    # each escalated incident ran the full workflow: explorer once, review retried, best stored with a warning
    counts = llm_server.counts_by_schema()
    assert counts["analysis_exploration_code"] == 3
    # ... from the lane's attempt: per incident the lane extracted and reviewed once, the workflow once more
    assert (counts["email_extraction"], counts["review_verdict"]) == (6, 6), counts
    for i in range(3):
        described = await client.get_workflow_handle(f"accumulate:{result.batch_id}:{i}").describe()
        assert described.status.name == "COMPLETED"
    views = [await services.store.knowledge.graph_view(g) for g in await _graph_ids(services)]
    assert len(views) == 3 and all(any("stored the best" in w for w in v["warnings"]) for v in views)


async def test_model_errors_escalate_and_the_child_reports_the_real_reason(client, running_worker, llm_server, tmp_path):
    llm_server.handler = schema_router({"email_extraction": lambda r: Reply.error(400, "model refuses this prompt")},
                                       default=accumulation_handler())
    path = _write(tmp_path, 2)
    result = await _populate(client, path, concurrency=2)
    assert (result.done, result.failed, result.escalated) == (0, 2, 2)
    assert all("model refuses this prompt" in f.reason for f in result.failures), result.failures


async def test_per_incident_mode_runs_one_child_per_incident(client, running_worker, services, llm_server, tmp_path):
    path = _write(tmp_path, 3)
    result = await _populate(client, path, concurrency=2, one_workflow_per_incident=True)
    assert (result.done, result.failed, result.escalated) == (3, 0, 0)
    for i in range(3):
        described = await client.get_workflow_handle(f"accumulate:{result.batch_id}:{i}").describe()
        assert described.status.name == "COMPLETED"
    assert await _graph_rows(services) == 3


async def test_lane_resumes_from_heartbeated_outcomes(services, llm_server, settings, tmp_path):
    """A retried lane skips what the dead attempt reported and redoes the rest idempotently."""
    path = _write(tmp_path, 6)
    sources = list(enumerate(list_sources(str(path))))
    storer = GraphStorer(services.store, services.embedder, settings.canonical_match_threshold)
    first = AccumulationLane(services.strategy, services.llm, storer, parallelism=2)
    outcomes = await first.run(sources[:4], run_id="wf", scope="wf")
    assert [o.status for o in outcomes] == ["stored"] * 4
    calls = llm_server.call_count
    audit_rows = (await services.store.knowledge.stats()).audit_rows
    # the dead attempt got 0..3 stored but only reported 0 and 1 in its last heartbeat
    again = AccumulationLane(services.strategy, services.llm, storer, parallelism=2)
    reported = [ItemOutcome.model_validate(o.model_dump()) for o in outcomes[:2]]
    final = await again.run(sources, run_id="wf", scope="wf", done=reported)
    assert [o.index for o in final] == list(range(6)) and {o.status for o in final} == {"stored"}
    assert llm_server.call_count - calls == 2 * 4, "items 2..5 were learned again, 0 and 1 were not"
    stats = await services.store.knowledge.stats()
    assert stats.graphs == 6
    assert stats.audit_rows - audit_rows == 2, "re-stored items 2 and 3 were not audited twice"


async def test_lane_store_failure_fails_the_lane_for_a_retry(services, llm_server, settings, tmp_path):
    class BrokenStorer(GraphStorer):
        async def store_many(self, requests):
            raise RuntimeError("database went away")

    path = _write(tmp_path, 3)
    lane = AccumulationLane(services.strategy, services.llm,
                            BrokenStorer(services.store, services.embedder, settings.canonical_match_threshold),
                            parallelism=3)
    with pytest.raises(RuntimeError, match="database went away"):
        await lane.run(list(enumerate(list_sources(str(path)))), run_id="wf", scope="k")


async def _graph_ids(services) -> list[str]:
    async with services.store.pool.connection() as conn:
        return [r[0] for r in await (await conn.execute("SELECT graph_id FROM graphs ORDER BY graph_id")).fetchall()]


async def test_pause_lets_running_lanes_finish_and_cancel_keeps_what_was_stored(client, running_worker, services,
                                                                                llm_server, tmp_path):
    import asyncio

    from bamboo.models.accumulate import PopulateProgress

    llm_server.latency_s = 0.15
    handle = await _start(client, _write(tmp_path, 12), concurrency=2, chunk_size=2)

    async def progress() -> PopulateProgress:
        return await handle.query("progress", result_type=PopulateProgress)

    while (await progress()).done < 2:
        await asyncio.sleep(0.1)
    await handle.signal("pause")
    while (await progress()).running:
        await asyncio.sleep(0.1)
    held = await progress()
    await asyncio.sleep(1.5)
    still = await progress()
    assert still.paused and still.running == 0 and still.done == held.done < 12, "a paused batch starts nothing new"
    await handle.signal("cancel")
    result = await handle.result()
    assert result.cancelled and result.done == held.done
    assert await _graph_rows(services) == result.done, "every counted incident is stored, nothing more"


async def test_the_end_of_a_run_is_shared_between_the_lanes(client, running_worker, services, llm_server, tmp_path):
    """No lane starts a full slice while the other would idle: each slice is at most half of what is
    left (or the lane's parallelism), so both lanes finish their run at about the same time."""
    path = _write(tmp_path, 40)
    result = await _populate(client, path, concurrency=8, chunk_size=32)
    assert (result.done, result.failed) == (40, 0)
    slices = await _slices_handed_out(client.get_workflow_handle(f"populate:{result.batch_id}"))
    assert sum(count for _, count in slices) == 40
    per_lane = 4
    for offset, count in slices:
        assert count <= max(-(-(40 - offset) // 2), per_lane), slices


async def _lane_events(handle) -> list[tuple[str, int, int]]:
    """The batch's lane traffic in history order: ("lane", offset, count) when a lane activity is
    scheduled, ("claimed", offset, count) for a slice `claim_slice` granted, ("done", offset, 0) when a
    `slice_done` is accepted, ("released", offset, 0) for a `lane_released` signal."""
    events, updates = [], {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "accumulate_chunk":
                chunk = json.loads(attrs.input.payloads[0].data)
                events.append(("lane", chunk["offset"], chunk["count"]))
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name == "lane_released":
                events.append(("released", json.loads(signal.input.payloads[0].data), 0))
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            updates[request.meta.update_id] = request.input.name
            if request.input.name == "slice_done":
                events.append(("done", json.loads(request.input.args.payloads[0].data)["offset"], 0))
        elif event.HasField("workflow_execution_update_completed_event_attributes"):
            done = event.workflow_execution_update_completed_event_attributes
            if updates.get(done.meta.update_id) == "claim_slice":
                grant = json.loads(done.outcome.success.payloads[0].data)
                if grant["count"]:
                    events.append(("claimed", grant["offset"], grant["count"]))
    return events


async def _slices_handed_out(handle) -> list[tuple[int, int]]:
    """(offset, count) of every slice the batch gave a lane: at the lane's start or by `claim_slice`."""
    return sorted((offset, count) for kind, offset, count in await _lane_events(handle) if kind in ("lane", "claimed"))


async def _until_a_lane_runs(handle) -> None:
    from bamboo.models.accumulate import PopulateProgress

    for _ in range(100):
        if (await handle.query("progress", result_type=PopulateProgress)).running:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no lane started within 5 s")


class _HeldStorer(GraphStorer):
    """Commits wait until the test lets them through, so a lane is caught between its LLM work and
    its last commit."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.open = asyncio.Event()

    async def store_many(self, requests):
        await self.open.wait()
        return await super().store_many(requests)


async def test_a_lane_reports_its_llm_work_over_once_while_its_commits_are_pending(services, llm_server, settings,
                                                                                 tmp_path):
    path = _write(tmp_path, 5, bad=1)
    storer = _HeldStorer(services.store, services.embedder, settings.canonical_match_threshold)
    lane = AccumulationLane(services.strategy, services.llm, storer, parallelism=2)
    seen: list[int] = []

    async def released() -> None:
        seen.append(llm_server.call_count)
        storer.open.set()  # without the report the commits never happen and the lane never ends

    outcomes = await asyncio.wait_for(
        lane.run(list(enumerate(list_sources(str(path)))), run_id="wf", scope="k", on_released=released), 30)
    assert [o.status for o in outcomes].count("stored") == 5
    assert seen == [2 * 5], "reported once, after every incident's two LLM calls"


async def test_a_lane_with_nothing_left_to_commit_does_not_report(services, llm_server, settings, tmp_path):
    path = _write(tmp_path, 0, bad=2)
    lane = AccumulationLane(services.strategy, services.llm,
                            GraphStorer(services.store, services.embedder, settings.canonical_match_threshold),
                            parallelism=2)
    seen = []

    async def released() -> None:
        seen.append(True)

    outcomes = await lane.run(list(enumerate(list_sources(str(path)))), run_id="wf", scope="k",
                              on_released=released)
    assert [o.status for o in outcomes] == ["failed", "failed"] and seen == []


async def test_failing_reports_do_not_fail_the_lane(services, llm_server, settings, tmp_path, monkeypatch):
    import bamboo.accumulation.lane as lane_module

    monkeypatch.setattr(lane_module, "PROGRESS_EVERY_S", 0.05)
    llm_server.latency_s = 0.1
    path = _write(tmp_path, 6)
    lane = AccumulationLane(services.strategy, services.llm,
                            GraphStorer(services.store, services.embedder, settings.canonical_match_threshold),
                            parallelism=2)
    attempts = []

    async def unreachable(*_: int) -> None:
        attempts.append(_)
        raise RuntimeError("temporal unreachable")

    outcomes = await lane.run(list(enumerate(list_sources(str(path)))), run_id="wf", scope="k",
                              on_released=unreachable, on_progress=unreachable)
    assert [o.status for o in outcomes] == ["stored"] * 6
    assert () in attempts and any(a for a in attempts), "both reports were tried"


async def test_a_lane_claims_its_next_slice_before_the_current_one_ends(client, running_worker, services,
                                                                      llm_server, tmp_path):
    """One lane (concurrency 4), slices of 4: before claims, every slice was its own activity and the
    lane's slots idled through its last incidents, its commits and the next activity's start. Now
    one lane activity claims each next slice while the current one still runs and reports each
    finished slice, never with more than 4 chats in flight."""
    llm_server.latency_s = 0.3  # embeddings too: each commit takes at least that long
    path = _write(tmp_path, 12)
    result = await _populate(client, path, concurrency=4, chunk_size=4)
    assert (result.done, result.failed) == (12, 0)
    assert llm_server.max_chats_in_flight <= 4
    handle = client.get_workflow_handle(f"populate:{result.batch_id}")
    assert await _slices_handed_out(handle) == [(0, 4), (4, 4), (8, 4)]
    events = await _lane_events(handle)
    kinds = [kind for kind, _, _ in events]
    assert kinds.count("lane") == 1 and kinds.count("released") == 1, events
    order = [(kind, offset) for kind, offset, _ in events]
    assert order.index(("claimed", 4)) < order.index(("done", 0)), order
    assert order.index(("claimed", 8)) < order.index(("done", 4)), order


async def test_progress_moves_while_a_slice_runs_not_only_when_it_ends(client, running_worker, services, llm_server,
                                                                       tmp_path, monkeypatch):
    """One lane, one slice of 12: before lanes reported progress, `done` stayed 0 until the slice
    ended. Now it moves while the slice runs and never goes back, and the counts add up."""
    import bamboo.accumulation.lane as lane_module
    from bamboo.models.accumulate import PopulateProgress

    monkeypatch.setattr(lane_module, "PROGRESS_EVERY_S", 0.2)
    llm_server.latency_s = 0.2
    handle = await _start(client, _write(tmp_path, 12), concurrency=2, chunk_size=12)
    seen: list[PopulateProgress] = []
    while not seen or not seen[-1].finished:
        seen.append(await handle.query("progress", result_type=PopulateProgress))
        await asyncio.sleep(0.1)
    result = await handle.result()
    assert result.done == 12
    during = [p for p in seen if not p.finished and p.total]
    assert any(0 < p.done < 12 for p in during), [p.done for p in seen]
    assert [p.done for p in seen] == sorted(p.done for p in seen), "progress never goes back"
    for p in during:
        assert p.done + p.failed + p.running + p.pending == p.total, p
    reports = 0
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_signaled_event_attributes"):
            reports += event.workflow_execution_signaled_event_attributes.signal_name == "lane_progress"
    assert reports >= 2


async def test_a_rejection_keeps_the_lanes_attempt_and_a_reviewer_error_does_not(services, llm_server, settings,
                                                                               tmp_path):
    """The incident's own workflow starts from what the lane learned after a rejection; after a
    reviewer error it must ask again (that retry is why the incident was escalated)."""
    from bamboo.models.accumulate import PriorAttempt

    storer = GraphStorer(services.store, services.embedder, settings.canonical_match_threshold)
    sources = list(enumerate(list_sources(str(_write(tmp_path, 1)))))

    llm_server.handler = accumulation_handler(review=reject)
    [rejected] = await AccumulationLane(services.strategy, services.llm, storer, parallelism=1).run(
        sources, run_id="wf", scope="k")
    assert rejected.status == "escalated" and rejected.prior_ref
    prior = PriorAttempt.model_validate_json(await services.store.blobs.get(rejected.prior_ref))
    assert not prior.review.approved and prior.review.issues == ["Cause node is too vague"]
    assert any(n.kind == "Cause" for n in prior.extraction.graph.nodes)

    llm_server.handler = accumulation_handler(review=lambda r: Reply.error(400, "reviewer is down"))
    [failed_review] = await AccumulationLane(services.strategy, services.llm, storer, parallelism=1).run(
        sources, run_id="wf", scope="k")
    assert failed_review.status == "escalated" and "reviewer failed" in failed_review.reason
    assert failed_review.prior_ref is None


async def test_escalated_incidents_and_lanes_share_one_budget(client, running_worker, services, llm_server, tmp_path):
    """Incidents escalated by a lane run as their own workflows while the next slices are still
    in lanes. Both talk to the model, so together they must stay within the batch's concurrency:
    a lane started while escalations run takes only the slots they leave."""
    reviews = {"n": 0}

    def every_third_rejected(request):
        reviews["n"] += 1
        return reject(request) if reviews["n"] % 3 == 0 else accumulation_handler()(request)

    plan = {"code": "return {'checked': 'walltime'}", "capability_gaps": []}
    llm_server.handler = schema_router({"analysis_exploration_code": lambda r: plan, "review_verdict": every_third_rejected},
                                       default=accumulation_handler())
    llm_server.latency_s = 0.1
    result = await _populate(client, _write(tmp_path, 24), concurrency=4, chunk_size=4, max_review_retries=1)
    assert result.done == 24 and result.escalated > 0, result
    assert llm_server.max_chats_in_flight <= 4, llm_server.max_chats_in_flight


async def test_a_claiming_lane_takes_the_next_slice_while_a_round_still_waits(services, llm_server, settings,
                                                                            tmp_path):
    """Parallelism 2, slices of 4: the lane claims the next slice while the current one still has
    incidents in flight, reports each slice once with its outcomes, and tells the batch its LLM work
    is over only after the batch said there is no more."""
    llm_server.latency_s = 0.05
    sources = list(enumerate(list_sources(str(_write(tmp_path, 12)))))
    lane = AccumulationLane(services.strategy, services.llm,
                            GraphStorer(services.store, services.embedder, settings.canonical_match_threshold),
                            parallelism=2)
    grants = [(4, sources[4:8]), (8, sources[8:12]), None]
    events: list[tuple] = []
    handed, reported = set(range(4)), set()

    async def claim():
        events.append(("claim", len(handed - reported - set(lane.outcomes))))
        grant = grants.pop(0)
        if grant:
            handed.update(i for i, _ in grant[1])
        return grant

    async def slice_done(offset, outcomes):
        reported.update(o.index for o in outcomes)
        events.append(("done", offset, sorted((o.index, o.status) for o in outcomes)))

    async def released():
        events.append(("released",))

    left = await lane.run(slices=[(0, sources[:4])], run_id="wf", scope="k", claim=claim,
                          on_slice_done=slice_done, on_released=released)
    assert left == [], "every outcome went to the batch with its slice"
    claims = [e for e in events if e[0] == "claim"]
    assert len(claims) == 3 and all(unsettled > 0 for _, unsettled in claims[:2]), events
    done = [e for e in events if e[0] == "done"]
    assert [e[1] for e in sorted(done)] == [0, 4, 8]
    for _, offset, outcomes in done:
        assert outcomes == [(i, "stored") for i in range(offset, offset + 4)]
    assert events.index(("released",)) > events.index(claims[-1]), "released only once nothing more comes"
    assert await _graph_rows(services) == 12


async def test_a_slice_report_that_fails_leaves_its_outcomes_in_the_lanes_result(services, llm_server, settings,
                                                                                tmp_path):
    sources = list(enumerate(list_sources(str(_write(tmp_path, 4)))))
    lane = AccumulationLane(services.strategy, services.llm,
                            GraphStorer(services.store, services.embedder, settings.canonical_match_threshold),
                            parallelism=2)

    async def no_more():
        return None

    async def unreachable(offset, outcomes):
        raise RuntimeError("temporal unreachable")

    left = await lane.run(slices=[(0, sources[:2]), (2, sources[2:])], run_id="wf", scope="k",
                          claim=no_more, on_slice_done=unreachable)
    assert [(o.index, o.status) for o in left] == [(i, "stored") for i in range(4)]
    assert lane.slices_reported == 0


async def test_forged_slice_messages_change_nothing(client, running_worker, llm_server, tmp_path):
    """The batch takes slice reports only from the lane holding the slice, with outcomes inside it,
    and hands slices only to its running lanes: forged reports are refused before they reach the
    history, a forged claim gets nothing, and the batch's counts stay its own."""
    from temporalio.client import WorkflowUpdateFailedError

    from bamboo.models.accumulate import SliceClaim, SliceGrant, SliceReport

    llm_server.latency_s = 1.0  # the lane holds its slice for seconds
    handle = await _start(client, _write(tmp_path, 4), concurrency=2)
    await _until_a_lane_runs(handle)
    outside = SliceReport(lane=0, offset=0, outcomes=[ItemOutcome(index=99, status="stored")])
    other_lane = SliceReport(lane=7, offset=0, outcomes=[ItemOutcome(index=0, status="stored")])
    for forged in (outside, other_lane):
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("slice_done", forged)
    grant = await handle.execute_update("claim_slice", SliceClaim(lane=99), result_type=SliceGrant)
    assert grant.count == 0
    result = await handle.result()
    assert (result.done, result.failed, result.escalated) == (4, 0, 0)


async def test_a_lane_retried_after_giving_back_its_slots_learns_nothing(client, running_worker, services,
                                                                         llm_server, tmp_path):
    """A lane that had released its slots (they may already serve escalated incidents or another
    lane) and is then retried must not talk to the model again: it returns what it had settled, and
    the batch gives the rest their own workflows within the budget."""
    import dataclasses

    from temporalio.testing import ActivityEnvironment

    from activities.accumulate import AccumulateActivities
    from bamboo.models.accumulate import ChunkInput

    class MustNotLearn:
        name = "panda"

        async def extract(self, *args, **kwargs):
            raise AssertionError("a lane retried after its release learned again")

    llm_server.latency_s = 1.0
    path = _write(tmp_path, 4)
    listing = "\n".join(s.model_dump_json(exclude_none=True) for s in list_sources(str(path))).encode()
    listing_ref = await services.store.blobs.put(listing)  # the batch's own listing (content-addressed)
    handle = await _start(client, path, concurrency=2)
    await _until_a_lane_runs(handle)
    await handle.signal("lane_released", 0)  # as the first attempt would have, just before its worker died
    env = ActivityEnvironment(client=client)
    env.info = dataclasses.replace(env.info, attempt=2, workflow_id=handle.id,
                                   workflow_run_id=handle.first_execution_run_id, heartbeat_details=[
                                       [ItemOutcome(index=1, status="stored").model_dump(mode="json")]])
    retry = AccumulateActivities(dataclasses.replace(services, strategy=MustNotLearn()))
    result = await env.run(retry.accumulate_chunk, ChunkInput(batch_id="x", listing_ref=listing_ref, offset=0, count=4,
                                                              parallelism=2, claims=True))
    assert [(o.index, o.status) for o in result.outcomes] == [(1, "stored")]
    assert (await handle.result()).done == 4  # the real first attempt was alive all along and finished


async def test_a_run_whose_history_passes_the_cap_continues_as_new_and_nothing_is_stored_twice(
        client, running_worker, services, llm_server, tmp_path):
    """Escalations and slice traffic add events per incident: a run with a large share would reach
    Temporal's 51,200-event limit and be terminated. Past `max_history_events` a run hands out no
    more slices, lets its lanes finish and continues as new."""
    handle = await _start(client, _write(tmp_path, 40), concurrency=4, chunk_size=4, max_history_events=40)
    result = await handle.result()
    assert (result.done, result.failed, result.escalated) == (40, 0, 0), result.failures
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{handle.id}"')]
    assert len(runs) >= 3, f"expected the batch to continue as new several times, got {len(runs)} run(s)"
    lengths = [len((await client.get_workflow_handle(handle.id, run_id=r.run_id).fetch_history()).events) for r in runs]
    assert max(lengths) < 150, lengths
    assert await _graph_rows(services) == 40
    audit = await services.store.audit.tail(500)
    assert sum(1 for row in audit if row["kind"] == "graph_stored") == 40
