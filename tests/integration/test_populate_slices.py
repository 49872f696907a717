"""Populate slices on the real stack: the happy path stays in one activity per slice, anything else
is escalated to its own AccumulateIncident workflow (visible and retried there), a slice retried
after its worker vanished resumes from its heartbeated outcomes, the window never runs more slices
or model calls than the batch allows, and the per-incident mode still works for operators who want
every step in Temporal Web."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from bamboo.accumulation.slice_learner import SliceLearner
from bamboo.accumulation.storing import GraphStorer
from bamboo.ingest import list_sources
from bamboo.accumulation.contract import ItemOutcome, PopulateInput, PopulateResult
from tests.support.answers import accumulation_handler, reject
from tests.support.scripted_llm import Reply, schema_router
from workflows.populate import PopulateBatch
from bamboo.contract import Queue

TASK = {"status": "failed", "errorDialog": "reason=WalltimeExceeded job hit limit", "processingType": "simul",
        "coreCount": 1}
EMAIL = ("From: shifter\nThe jobs failed due to too short walltime for the simulation step. "
         "We increased the walltime and resubmitted.")


def _write(tmp_path: Path, n: int, *, bad: int = 0) -> Path:
    d = tmp_path / "incidents"
    d.mkdir()
    for i in range(n):
        (d / f"{i:03d}.json").write_text(json.dumps(
            {"incident_id": f"slice-{i}", "task_data": {**TASK, "jediTaskID": 41000000 + i}, "email_text": EMAIL}))
    for i in range(bad):
        (d / f"bad-{i}.json").write_text("{ not json")
    return d


async def _start(client, path: Path, **extra):
    bid = f"slices-{uuid.uuid4().hex[:8]}"
    return await client.start_workflow(
        PopulateBatch.run, PopulateInput(batch_id=bid, path=str(path), **extra),
        id=f"populate:{bid}", task_queue=Queue.MAIN, result_type=PopulateResult,
    )


async def _populate(client, path: Path, **extra) -> PopulateResult:
    return await (await _start(client, path, **extra)).result()


async def _graph_rows(services) -> int:
    return (await services.store.knowledge.stats()).graphs


async def test_happy_path_stays_in_slices_and_bad_input_fails_its_item(client, running_worker, services, llm_server,
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
    # ... from the slice's attempt: per incident the slice extracted and reviewed once, the workflow once more
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


async def test_learner_resumes_from_heartbeated_outcomes(services, llm_server, settings, tmp_path):
    """A retried slice skips what the dead attempt heartbeated and redoes the rest idempotently."""
    path = _write(tmp_path, 6)
    sources = list(enumerate(list_sources(str(path))))
    storer = GraphStorer(services.store, services.embedder, settings.canonical_match_threshold)
    first = SliceLearner(services.strategy, services.llm, storer, parallelism=2)
    outcomes = await first.run(sources[:4], run_id="wf", scope="wf")
    assert [o.status for o in outcomes] == ["stored"] * 4
    calls = llm_server.call_count
    audit_rows = (await services.store.knowledge.stats()).audit_rows
    # the dead attempt got 0..3 stored but only reported 0 and 1 in its last heartbeat
    again = SliceLearner(services.strategy, services.llm, storer, parallelism=2)
    reported = [ItemOutcome.model_validate(o.model_dump()) for o in outcomes[:2]]
    final = await again.run(sources, run_id="wf", scope="wf", done=reported)
    assert [o.index for o in final] == list(range(6)) and {o.status for o in final} == {"stored"}
    assert llm_server.call_count - calls == 2 * 4, "items 2..5 were learned again, 0 and 1 were not"
    stats = await services.store.knowledge.stats()
    assert stats.graphs == 6
    assert stats.audit_rows - audit_rows == 2, "re-stored items 2 and 3 were not audited twice"


async def test_a_store_failure_fails_the_slice_for_a_retry(services, llm_server, settings, tmp_path):
    class BrokenStorer(GraphStorer):
        async def store_many(self, requests):
            raise RuntimeError("database went away")

    path = _write(tmp_path, 3)
    learner = SliceLearner(services.strategy, services.llm,
                           BrokenStorer(services.store, services.embedder, settings.canonical_match_threshold),
                           parallelism=3)
    with pytest.raises(RuntimeError, match="database went away"):
        await learner.run(list(enumerate(list_sources(str(path)))), run_id="wf", scope="k")


async def _graph_ids(services) -> list[str]:
    async with services.store.pool.connection() as conn:
        return [r[0] for r in await (await conn.execute("SELECT graph_id FROM graphs ORDER BY graph_id")).fetchall()]


async def test_pause_lets_running_slices_finish_and_cancel_keeps_what_was_stored(client, running_worker, services,
                                                                                llm_server, tmp_path):
    import asyncio

    from bamboo.accumulation.contract import PopulateProgress

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


async def test_the_end_of_a_run_is_shared_between_the_slices(client, running_worker, services, llm_server, tmp_path):
    """No slice starts full-size while the window's other slot would idle: each slice is at most half
    of what is left (or a slice's parallelism), so both finish the run at about the same time."""
    path = _write(tmp_path, 40)
    result = await _populate(client, path, concurrency=8, chunk_size=32)
    assert (result.done, result.failed) == (40, 0)
    slices = await _slices_handed_out(client.get_workflow_handle(f"populate:{result.batch_id}"))
    assert sum(count for _, count in slices) == 40
    width = 4
    for offset, count in slices:
        assert count <= max(-(-(40 - offset) // 2), width), slices


async def _slice_events(handle) -> list[tuple[str, int, int]]:
    """The batch's slice activities in history order: ("start", offset, count) when one is scheduled,
    ("end", offset, 0) when it completes or fails."""
    events, scheduled = [], {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "learn_slice":
                inp = json.loads(attrs.input.payloads[0].data)
                scheduled[event.event_id] = inp["offset"]
                events.append(("start", inp["offset"], inp["count"]))
        for field in ("activity_task_completed_event_attributes", "activity_task_failed_event_attributes"):
            if event.HasField(field):
                offset = scheduled.get(getattr(event, field).scheduled_event_id)
                if offset is not None:
                    events.append(("end", offset, 0))
    return events


async def _slices_handed_out(handle) -> list[tuple[int, int]]:
    """(offset, count) of every slice activity the batch scheduled."""
    return sorted((offset, count) for kind, offset, count in await _slice_events(handle) if kind == "start")


async def _until_a_slice_runs(handle) -> None:
    from bamboo.accumulation.contract import PopulateProgress

    for _ in range(100):
        if (await handle.query("progress", result_type=PopulateProgress)).running:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no slice started within 5 s")


async def test_the_window_runs_at_most_two_slices_and_starts_the_next_when_one_ends(
        client, running_worker, services, llm_server, tmp_path):
    """Concurrency 8: two slices of parallelism 4 at a time, slices of 4. A new slice starts only
    when one has ended, every incident is in exactly one slice, and the model never sees more
    than 8 calls at once. The batch and its slices exchange nothing but the slices' results."""
    llm_server.latency_s = 0.1
    handle = await _start(client, _write(tmp_path, 24), concurrency=8, chunk_size=4)
    result = await handle.result()
    assert (result.done, result.failed) == (24, 0)
    assert llm_server.max_chats_in_flight <= 8
    events = await _slice_events(handle)
    assert await _slices_handed_out(handle) == [(o, 4) for o in range(0, 24, 4)]
    running = peak = 0
    for kind, _, _ in events:
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak == 2, events
    async for event in handle.fetch_history_events():
        assert not event.HasField("workflow_execution_signaled_event_attributes"), "no messages from slices"
        assert not event.HasField("workflow_execution_update_accepted_event_attributes"), "no updates"


async def test_progress_moves_while_a_slice_runs_not_only_when_it_ends(client, running_worker, services, llm_server,
                                                                       tmp_path):
    """One slice of 12 at parallelism 2: the workflow counts a slice when it ends, so without the
    slice's heartbeats `done` stayed 0 until then. `live_progress` adds what the running slice has
    heartbeated: it moves while the slice runs, never goes back, and the counts add up."""
    from bamboo.accumulation.contract import PopulateProgress
    from bamboo.accumulation.client import live_progress

    llm_server.latency_s = 0.4
    handle = await _start(client, _write(tmp_path, 12), concurrency=2, chunk_size=12)
    seen: list[PopulateProgress] = []
    while not seen or not seen[-1].finished:
        try:
            seen.append(await live_progress(handle))
        except Exception:  # the workflow's first task may not have run yet
            pass
        await asyncio.sleep(0.1)
    result = await handle.result()
    assert result.done == 12
    during = [p for p in seen if not p.finished and p.total]
    assert any(0 < p.done < 12 and p.slices_running == 1 for p in during), [p.done for p in seen]
    assert [p.done for p in seen] == sorted(p.done for p in seen), "progress never goes back"
    for p in during:
        assert p.done + p.failed + p.skipped + p.running + p.pending == p.total, p
    assert seen[-1].slices_done == 1 and seen[-1].slices_running == 0


async def test_a_rejection_keeps_the_slices_attempt_and_a_reviewer_error_does_not(services, llm_server, settings,
                                                                                 tmp_path):
    """The incident's own workflow starts from what the slice learned after a rejection; after a
    reviewer error it must ask again (that retry is why the incident was escalated)."""
    from bamboo.accumulation.contract import PriorAttempt

    storer = GraphStorer(services.store, services.embedder, settings.canonical_match_threshold)
    sources = list(enumerate(list_sources(str(_write(tmp_path, 1)))))

    llm_server.handler = accumulation_handler(review=reject)
    [rejected] = await SliceLearner(services.strategy, services.llm, storer, parallelism=1).run(
        sources, run_id="wf", scope="k")
    assert rejected.status == "escalated" and rejected.prior_ref
    prior = PriorAttempt.model_validate_json(await services.store.blobs.get(rejected.prior_ref))
    assert not prior.review.approved and prior.review.issues == ["Cause node is too vague"]
    assert any(n.kind == "Cause" for n in prior.extraction.graph.nodes)

    llm_server.handler = accumulation_handler(review=lambda r: Reply.error(400, "reviewer is down"))
    [failed_review] = await SliceLearner(services.strategy, services.llm, storer, parallelism=1).run(
        sources, run_id="wf", scope="k")
    assert failed_review.status == "escalated" and "reviewer failed" in failed_review.reason
    assert failed_review.prior_ref is None


async def test_escalated_incidents_and_slices_share_one_budget(client, running_worker, services, llm_server, tmp_path):
    """Incidents escalated by a slice run as their own workflows while the next slices run. Both
    talk to the model, so together they must stay within the batch's concurrency: a slice started
    while escalations run takes only the slots they leave."""
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


async def test_a_run_whose_history_passes_the_cap_continues_as_new_and_nothing_is_stored_twice(
        client, running_worker, services, llm_server, tmp_path):
    """Escalations add events per incident: a run with a large share would reach Temporal's
    51,200-event limit and be terminated. Past `max_history_events` a run hands out no more
    slices, lets its running slices finish and continues as new."""
    handle = await _start(client, _write(tmp_path, 40), concurrency=4, chunk_size=4, max_history_events=25)
    result = await handle.result()
    assert (result.done, result.failed, result.escalated) == (40, 0, 0), result.failures
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{handle.id}"')]
    assert len(runs) >= 3, f"expected the batch to continue as new several times, got {len(runs)} run(s)"
    lengths = [len((await client.get_workflow_handle(handle.id, run_id=r.run_id).fetch_history()).events) for r in runs]
    assert max(lengths) < 150, lengths
    assert await _graph_rows(services) == 40
    audit = await services.store.audit.tail(500)
    assert sum(1 for row in audit if row["kind"] == "graph_stored") == 40


async def test_escalations_count_against_a_run_s_history_cap(client, running_worker, services, llm_server, tmp_path):
    """Every escalated incident adds its child's events, and a run ends all of them before it continues as new:
    counted on history alone, a run whose slices escalated most incidents went on handing out slices and reached
    several times its cap (3,681 events against 1,000, measured), towards Temporal's 51,200-event limit."""
    reviews = {"n": 0}

    def every_other_rejected(request):
        reviews["n"] += 1
        return reject(request) if reviews["n"] % 2 else accumulation_handler()(request)

    plan = {"code": "return {'checked': 'walltime'}", "capability_gaps": []}
    llm_server.handler = schema_router({"analysis_exploration_code": lambda r: plan,
                                        "review_verdict": every_other_rejected}, default=accumulation_handler())
    handle = await _start(client, _write(tmp_path, 40), concurrency=4, chunk_size=4, max_review_retries=1,
                          max_history_events=60)
    result = await handle.result()
    assert result.done + result.failed == 40 and result.escalated > 10, result
    runs = [r async for r in client.list_workflows(f'WorkflowId = "{handle.id}"')]
    lengths = [len((await client.get_workflow_handle(handle.id, run_id=r.run_id).fetch_history()).events) for r in runs]
    assert len(runs) >= 3 and max(lengths) < 130, lengths  # the cap, and what slices running then escalate


async def test_a_retried_slice_resumes_from_its_heartbeat_not_from_scratch(services, llm_server, settings, tmp_path):
    """The activity as Temporal retries it: attempt 2, with the dead attempt's last heartbeat. What
    the heartbeat settled (here incidents 0 and 1) is not learned again; the rest is."""
    import dataclasses

    from temporalio.testing import ActivityEnvironment

    from activities.accumulate import AccumulateActivities
    from bamboo.accumulation.contract import SliceHeartbeat, SliceInput

    path = _write(tmp_path, 6)
    listing = "\n".join(s.model_dump_json(exclude_none=True) for s in list_sources(str(path))).encode()
    listing_ref = await services.store.blobs.put(listing)
    beat = SliceHeartbeat(outcomes=[ItemOutcome(index=0, status="stored"), ItemOutcome(index=1, status="stored")])
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, workflow_id="populate:resume",
                                   heartbeat_details=[beat.model_dump(mode="json")])
    result = await env.run(AccumulateActivities(services).learn_slice,
                           SliceInput(batch_id="resume", listing_ref=listing_ref, offset=0, count=6, parallelism=2,
                                      store_scope="populate:resume:run"))
    assert [(o.index, o.status) for o in result.outcomes] == [(i, "stored") for i in range(6)]
    assert llm_server.call_count == 2 * 4, "only incidents 2..5 were learned"
    assert await _graph_rows(services) == 4


async def test_a_pause_sent_with_the_start_holds_the_batch_before_anything_runs(client, running_worker, services,
                                                                               tmp_path):
    """Issue 29, item 1: a pause that reached PopulateBatch before its first workflow task was dropped."""
    import asyncio

    from bamboo.accumulation.contract import PopulateProgress

    path = _write(tmp_path, 4)
    bid = f"slices-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        PopulateBatch.run, PopulateInput(batch_id=bid, path=str(path)), id=f"populate:{bid}", task_queue=Queue.MAIN,
        result_type=PopulateResult, start_signal="pause")
    await asyncio.sleep(2.0)
    held = await handle.query("progress", result_type=PopulateProgress)
    assert held.paused and held.done == 0 and held.running == 0, held
    assert await _graph_rows(services) == 0
    await handle.signal("resume")
    result = await handle.result()
    assert (result.done, result.failed) == (4, 0)
