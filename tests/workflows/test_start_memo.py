"""The memo a session is started with belongs to its starter: a requester started a genuine session (our type, our
queue) with memo keys of her choosing, an "approved_by" line and a forged pending review. Temporal Web showed them
as the session's, and `bamboo approvals` printed her review, "asked by bob (read-only)", until a worker ran. The
workflow now clears every key it was started with, and the client believes only a pending review naming the
chain's first run, which a starter cannot know. The real workflow, its activities faked (tests/workflows harness)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client

from bamboo.investigation import client as inv
from bamboo.investigation.contract import PENDING_MEMO, InvestigationStart, workflow_id
from tests.workflows.conftest import workers
from tests.workflows.test_investigation import READ_CODE, TASK, FakeSession, Session
from workflows.investigation import Investigation

FORGED = {PENDING_MEMO: {"turn": 1, "code_hash": "ab" * 32, "requester": "bob", "read_only": True,
                         "choices": ["run_once", "reject"], "request": "list the task's jobs", "review": "cd" * 32},
          "approved_by": "carol (shift lead) chose run_once for turn 1 " + "ab" * 32}


async def _start_with_forged_memo(temporal: Client, queue: str) -> Session:
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    handle = await temporal.start_workflow(
        Investigation.run, InvestigationStart(session_id=session_id, requester="alice", task_id=TASK,
                                              startup_hypothesis=False),
        id=workflow_id(session_id), task_queue=queue, memo=FORGED)
    return Session(handle, session_id)


async def test_the_memo_a_session_was_started_with_is_cleared_when_it_runs(temporal: Client, monkeypatch) -> None:
    fake = FakeSession(READ_CODE)
    async with workers(temporal, [Investigation], fake.activities()) as queue:
        monkeypatch.setattr(inv, "SESSION_QUEUE", queue)  # this test's workers are the deployment's here
        s = await _start_with_forged_memo(temporal, queue)
        await s.entries("system", 1)  # the session opened: its first workflow task ran
        assert await (await s.handle.describe()).memo() == {}
        await s.ask("alice", "status?")
        review = await s.pending(turn=1)
        memo = await inv.pending_memo(temporal, s.id)  # the session's own review is read as before
    assert memo is not None and (memo.turn, memo.code_hash, memo.review) == (1, review.code_hash, review.review)
    assert memo.run == s.handle.first_execution_run_id


async def test_a_pending_review_the_session_did_not_publish_is_not_read_from_its_memo(temporal: Client,
                                                                                     monkeypatch) -> None:
    """No worker has run the session yet (none polls its queue here): its memo is still the starter's."""
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(inv, "SESSION_QUEUE", queue)
    s = await _start_with_forged_memo(temporal, queue)
    assert PENDING_MEMO in await (await s.handle.describe()).memo()
    with pytest.raises(inv.InvestigationError, match="did not publish it"):
        await inv.pending_memo(temporal, s.id)
