"""One batch-control piece (issue 29): both batch workflows answer the batch contract's messages with one
progress model, record failures by one rule and take their input before any signal; one reason rule for a
failure; one heartbeat loop. No server: the workflow classes are exercised as objects, the activity with
Temporal's test environment."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment

from activities.heartbeat import EVERY_S, beat_interval, with_heartbeats
from bamboo.accumulation.contract import PopulateInput
from bamboo.analysis.contract import BatchAnalyzeInput
from bamboo.batch.contract import BATCH_SIGNALS, MAX_KEPT_FAILURES, PROGRESS_QUERY, BatchProgress, BatchState
from workflows.batch_analyze import BatchAnalyze
from workflows.batching import innermost_reason
from workflows.populate import PopulateBatch

BATCHES = [(PopulateBatch, PopulateInput(batch_id="b", path="/in")),
           (BatchAnalyze, BatchAnalyzeInput(batch_id="b", path="/in"))]


@pytest.mark.parametrize(("batch", "inp"), BATCHES, ids=["populate", "analyze"])
def test_every_batch_answers_the_contracts_messages_with_one_progress_model(batch, inp):
    definition = workflow._Definition.must_from_class(batch)
    assert set(definition.signals) == set(BATCH_SIGNALS)
    assert PROGRESS_QUERY in definition.queries
    control = batch(inp)
    control.pause()  # as a pause sent with the start: handled before the run, on the input @workflow.init took
    progress = control.progress()
    assert isinstance(progress, BatchProgress) and progress.paused and progress.batch_id == "b"
    control.resume()
    control.cancel()
    progress = control.progress()
    assert not progress.paused and progress.cancelled


@pytest.mark.parametrize(("batch", "inp"), BATCHES, ids=["populate", "analyze"])
def test_every_batch_counts_every_failure_and_keeps_the_last_reasons(batch, inp):
    control = batch(inp)
    for i in range(MAX_KEPT_FAILURES + 30):
        control._failed(i, f"item-{i}", "unreadable")
    progress = control.progress()
    assert progress.failed == MAX_KEPT_FAILURES + 30
    assert len(control._inp.failed) == MAX_KEPT_FAILURES and control._inp.failed[0].index == 30
    assert progress.recent_failures[-1].source == f"item-{MAX_KEPT_FAILURES + 29}"
    assert isinstance(control._inp, BatchState)


def _activity_error(cause: BaseException) -> ActivityError:
    exc = ActivityError("activity error", scheduled_event_id=1, started_event_id=2, identity="w",
                        activity_type="t", activity_id="1", retry_state=RetryState.NON_RETRYABLE_FAILURE)
    exc.__cause__ = cause
    return exc


def test_the_reason_is_the_innermost_failure_that_says_something():
    inner = ApplicationError("the listing at /in is not a directory", non_retryable=True)
    assert innermost_reason(_activity_error(inner)) == "the listing at /in is not a directory"
    silent = ApplicationError("")  # a failure that says nothing: its cause does
    silent.__cause__ = ApplicationError("disk full")
    assert innermost_reason(_activity_error(silent)) == "disk full"
    assert innermost_reason(_activity_error(ApplicationError(""))) == "ApplicationError"
    assert len(innermost_reason(ApplicationError("x" * 2000))) == 500


def test_beats_come_at_most_a_third_of_the_heartbeat_timeout_apart():
    assert beat_interval() == EVERY_S  # outside an activity: the default
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.9))
    assert env.run(beat_interval) == pytest.approx(0.3)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(minutes=5))
    assert env.run(beat_interval) == EVERY_S


async def test_a_cancelled_activity_lets_its_work_clean_up_before_the_cancellation_goes_on():
    """A sandbox run kills its child when cancelled; the cancellation must not overtake that."""
    started, cleaned = asyncio.Event(), []

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # cleanup that itself awaits (killing a process group)
            await asyncio.sleep(0)
            cleaned.append(True)
            raise

    async def activity_body() -> None:
        await with_heartbeats(work())

    env = ActivityEnvironment()
    running = asyncio.ensure_future(env.run(activity_body))
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert cleaned == [True]


async def test_a_cancel_during_a_page_read_starts_no_more_children():
    """The loop read a page and started a child from it without looking at the pause and cancel flags again,
    though a signal may be handled while the page is read."""
    from types import SimpleNamespace

    from workflows.batching import run_bounded_children

    state = SimpleNamespace(cursor=0, concurrency=4, continue_as_new_every=100, paused=False, generation=0)
    cancelled = False
    started: list[int] = []

    async def read_page(offset: int) -> list[str]:
        nonlocal cancelled
        cancelled = True  # the cancel signal, handled while this activity ran
        return ["a", "b"]

    async def start_child(index: int, item: str) -> None:
        started.append(index)

    await run_bounded_children(state, 2, read_page, start_child, set(), lambda: cancelled)
    assert started == [] and state.cursor == 0
