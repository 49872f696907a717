"""A decision sent while no worker polls is delivered, not turned away: the client reads what it answers from
the session's memo (the server's, no worker needed), signs it as always and sends it as a signal, and the
session judges it through the same admission when a worker runs: a right answer runs the code, a stale one is
refused in the transcript."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from bamboo.investigation import client as inv
from policy.code_identity import code_hash
from policy.decisions import DecisionKind
from tests.investigation.conftest import (
    KILL_CODE, READ_CODE, TASK_ID, entries, kill_process_group, new_session, spawn_worker_process,
    wait_for,
)
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.usefixtures("terminate_sessions")

# Short enough that a test without a worker does not idle long; nothing is asserted about time.
NO_WORKER = {"query_timeout_s": 3.0, "update_timeout_s": 3.0}


async def _waiting_without_worker(client, settings, ops, brain, tmp_path, session):
    """A session whose turn 1 waits for review, and no worker running any more."""
    brain.propose(READ_CODE, READ_CODE)
    worker = spawn_worker_process(settings, tmp_path / "worker-before.log")
    try:
        await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
        await inv.send_message(client, session, "what state is the task in?", ops.alice)
        view = await _pending(client, session, 1)
    finally:
        kill_process_group(worker)
    return view


async def _pending(client, session, turn):
    """The turn's review once a worker answers (one still starting on a loaded machine is asked again)."""
    async def probe():
        try:
            view = await inv.pending(client, session)
        except inv.InvestigationError:
            return None
        return view if view is not None and view.turn == turn else None
    return await wait_for(probe, timeout=120)


async def test_approval_while_no_worker_polls_runs_once_a_worker_starts(ops, client, settings, brain, tmp_path):
    session = new_session()
    view = await _waiting_without_worker(client, settings, ops, brain, tmp_path, session)
    operator = inv.InvestigationClient(client, **NO_WORKER)

    memo = await operator.pending_memo(session)
    assert memo is not None and (memo.turn, memo.code_hash, memo.requester) == (1, view.code_hash, "alice")
    assert memo.read_only
    listing = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "approvals"], cwd=ROOT, env=worker_env(settings),
        capture_output=True, text=True, timeout=300)
    assert f"{session} turn 1 {view.code_hash} asked by alice (read-only)" in " ".join(listing.stderr.split())
    delivery = await operator.decide_by_review(session, ops.bob, view.review[:32], DecisionKind.RUN_ONCE)
    assert delivery.durable and delivery.ack is None
    assert (delivery.turn, delivery.code_hash) == (1, view.code_hash)
    assert delivery.detail.startswith("delivered; the session will judge it when a worker runs")

    worker = spawn_worker_process(settings, tmp_path / "worker-after.log")
    try:
        runs = await _once_answered(client, session, "run")
        assert (runs[0].turn, runs[0].actor, runs[0].data["status"]) == (1, "bob", "ok")
        decisions = await entries(client, session, "decision")
        assert [(d.turn, d.actor) for d in decisions] == [(1, "bob")]
        assert decisions[0].data["signed"] and decisions[0].data["code_hash"] == view.code_hash
        assert await wait_for(lambda: _memo_cleared(operator, session))
    finally:
        kill_process_group(worker)


async def _memo_cleared(operator, session):
    return await operator.pending_memo(session) is None


async def _once_answered(client, session, kind, count=1):
    """The entries of ``kind`` once there are ``count``; a query no worker answered yet (it is starting) is
    asked again."""
    async def probe():
        try:
            found = await entries(client, session, kind)
        except inv.InvestigationError:
            return None
        return found if len(found) >= count else None
    return await wait_for(probe, timeout=120)


async def test_a_stale_decision_delivered_without_a_worker_is_refused_when_judged(ops, client, settings, brain,
                                                                                  tmp_path):
    session = new_session()
    view = await _waiting_without_worker(client, settings, ops, brain, tmp_path, session)
    operator = inv.InvestigationClient(client, **NO_WORKER)

    # Signed for other code than the code waiting (a page or a memo read before the code changed).
    stale = await operator.decide(session, ops.bob, view.turn, code_hash(KILL_CODE), DecisionKind.RUN_ONCE)
    assert stale.durable

    worker = spawn_worker_process(settings, tmp_path / "worker-after.log")
    try:
        refused = await _once_answered(client, session, "refused_decision")
        assert refused[0].actor == "bob" and refused[0].data["refusal"] == "hash_mismatch"
        assert refused[0].data["signature"]  # it came signed; a hash that does not match is refused before the check
        still = await _pending(client, session, 1)
        assert still.code_hash == view.code_hash
        assert await entries(client, session, "run") == []
        memo = await operator.pending_memo(session)
        assert memo is not None and memo.code_hash == view.code_hash
    finally:
        kill_process_group(worker)
