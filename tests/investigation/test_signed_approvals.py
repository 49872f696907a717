"""Signed approvals through the temporal CLI: a genuine one runs; a forged, expired, replayed or unregistered
one is refused, and each refusal is in the transcript and the audit log with its reason.

Also the other doors around review the trust-model issue found: rules a requester's client sent, identities
differing in case, an oversized or malformed request, and refusals that came back retryable.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from bamboo.approvals.keys import KeyStore
from bamboo.investigation import client as inv
from policy.decisions import DecisionKind, OperatorDecision
from tests.investigation.conftest import KILL_CODE, READ_CODE, TASK_ID, entries, kills, new_session, pending_turn, wait_for
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.usefixtures("terminate_sessions")

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"


async def _cli(settings, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = worker_env(settings)
    env.update(env_extra or {})
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT,
                                   env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


async def _signal(settings, session: str, name: str, payload: str) -> None:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(TEMPORAL_CLI), "workflow", "signal", "--address", settings.temporal_address, "--namespace",
         settings.temporal_namespace, "--workflow-id", inv.workflow_id(session), "--name", name, "--input", payload],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


async def _signed(settings, session: str, view, who: str, *extra: str, env_extra=None) -> str:
    out = await _cli(settings, "sign", "decide", session, view.code_hash[:32], "y", "--as", who,
                     "--review", view.review[:32], *extra,
                     env_extra=env_extra)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


async def _refusals(client, session, count: int) -> list[str]:
    async def probe():
        found = await entries(client, session, "refused_decision")
        return found if len(found) >= count else None
    return [e.data["refusal"] for e in await wait_for(probe)]


async def _audited_refusals(services, session: str) -> list[str]:
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT body->>'refusal' FROM audit WHERE kind = 'decision_refused' AND body->>'session' = %s "
            "ORDER BY seq", (session,))).fetchall()
    return [r[0] for r in rows]


async def test_signed_approval_round_trip_through_the_temporal_cli(ops, client, settings, services, running_worker,
                                                                   brain, sim, tmp_path):
    session = new_session()
    brain.propose(KILL_CODE)
    before = len(kills(sim))
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task", ops.alice)
    view = await pending_turn(client, session, 1)

    genuine = await _signed(settings, session, view, "carol")
    forged = json.loads(genuine)
    signature = bytearray(base64.b64decode(forged["auth"]["signature"]))
    signature[-1] ^= 0x55
    forged["auth"]["signature"] = base64.b64encode(bytes(signature)).decode()
    expired = await _signed(settings, session, view, "carol", "--ttl", "1")
    outsider = await _signed(settings, session, view, "outsider")
    other_keys = tmp_path / "other-keys"
    KeyStore(other_keys).create("bob")  # bob's name, a key the deployment never registered
    unregistered_key = await _signed(settings, session, view, "bob", env_extra={"BAMBOO_KEYS_DIR": str(other_keys)})
    await asyncio.sleep(1.5)  # the 1-second signature is now out of date

    for payload in (json.dumps(forged), expired, outsider, unregistered_key):
        await _signal(settings, session, "decide", payload)
    refused = await _refusals(client, session, 4)
    assert refused == ["bad_signature", "expired", "unregistered_identity", "unregistered_key"]
    assert await inv.pending(client, session) is not None and len(kills(sim)) == before

    await _signal(settings, session, "decide", genuine)

    async def ran():
        return [e for e in await entries(client, session, "run") if e.turn == 1]
    runs = await wait_for(ran)
    assert runs[0].actor == "carol" and len(kills(sim)) == before + 1
    await _signal(settings, session, "decide", genuine)  # the same signed decision again
    refused = await _refusals(client, session, 5)
    assert refused[-1] == "replayed"
    assert len(kills(sim)) == before + 1

    async def audited():
        rows = await _audited_refusals(services, session)
        return rows if len(rows) >= 5 else None
    assert await wait_for(audited) == ["bad_signature", "expired", "unregistered_identity", "unregistered_key",
                                       "replayed"]
    async with services.store.pool.connection() as conn:
        accepted = await (await conn.execute(
            "SELECT body FROM audit WHERE kind = 'decision_accepted' AND body->>'session' = %s", (session,))).fetchone()
    assert accepted[0]["signer"] == "carol" and accepted[0]["signature"] == json.loads(genuine)["auth"]["signature"]
    assert accepted[0]["policy_version"] == view.policy_version


async def test_the_requesters_client_cannot_weaken_the_rules(ops, client, settings, running_worker, brain, sim):
    """Issue: BAMBOO_REQUIRE_DISTINCT_APPROVER=false on the requester's client let their own `y` kill a task."""
    session = new_session()
    brain.propose(KILL_CODE)
    before = len(kills(sim))
    started = await _cli(settings, "investigate", "--task-id", str(TASK_ID), "--session", session, "--as", "alice",
                         "--no-hypothesis",
                         env_extra={"BAMBOO_REQUIRE_DISTINCT_APPROVER": "false", "BAMBOO_REQUIRE_SIGNATURES": "false"})
    assert started.returncode == 0, started.stdout + started.stderr
    await inv.send_message(client, session, "kill the task", ops.alice)
    view = await pending_turn(client, session, 1)
    assert view.rules.require_distinct_approver and view.rules.require_signatures
    mine = await _cli(settings, "approve", session, view.review, "y", "--as", "alice",
                      env_extra={"BAMBOO_REQUIRE_DISTINCT_APPROVER": "false"})
    assert mine.returncode != 0 and "someone other than" in (mine.stdout + mine.stderr)
    upper = await _cli(settings, "approve", session, view.review, "y", "--as", "ALICE")
    assert upper.returncode != 0 and "someone other than" in (upper.stdout + upper.stderr)
    assert len(kills(sim)) == before and await inv.pending(client, session) is not None


async def test_oversized_and_malformed_requests_are_refused_recorded_and_final(ops, client, settings, running_worker,
                                                                              brain):
    """Issue: a decide with a 1 MiB approver name was accepted and then every workflow task exceeded the
    payload limit; malformed signals were dropped with a log line; refusals came back retryable."""
    session = new_session()
    brain.propose(READ_CODE, READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status?", ops.alice)
    view = await pending_turn(client, session, 1)
    handle = inv.handle(client, session)
    huge = {"turn": 1, "code_hash": view.code_hash, "kind": "run_once", "approver": "x" * (1024 * 1024)}
    await handle.signal("decide", huge)
    await handle.signal("decide", "not an object")
    await handle.signal("message", {"text": "hello", "author": "bob", "extra": 1})
    with pytest.raises(WorkflowUpdateFailedError) as too_big:
        await handle.execute_update("decide", huge)
    assert too_big.value.cause.non_retryable and too_big.value.cause.type == "too_large"
    with pytest.raises(WorkflowUpdateFailedError) as wrong:
        await handle.execute_update("decide", {"turn": 1, "code_hash": view.code_hash, "kind": "run_once",
                                               "approver": "Bob", "review": view.review})
    assert wrong.value.cause.non_retryable and wrong.value.cause.type == "unsigned"

    async def recorded():
        found = [e for e in await inv.transcript(client, session) if e.kind in ("refused_decision", "refused_request")]
        return found if len(found) >= 4 else None
    found = await wait_for(recorded)
    assert [e.data["refusal"] for e in found] == ["too_large", "malformed", "malformed", "unsigned"]
    assert all(len(e.text) < 600 for e in found)
    # The session still works: the pending review can be answered and the next turn runs.
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    await inv.send_message(client, session, "again?", ops.alice)
    await pending_turn(client, session, 2)


async def test_unsigned_and_unregistered_messages_never_become_turns(ops, client, settings, running_worker, brain):
    session = new_session()
    brain.propose(KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill it", ops.unsigned("alice"))
    await inv.send_message(client, session, "kill it", ops.outsider)
    with pytest.raises(inv.InvestigationError) as refused:
        await inv.update(client, session, "message", inv.OperatorMessage(text="kill it", author="alice"),
                         ops.unsigned("alice"))
    assert refused.value.refusal == "unsigned"

    async def recorded():
        found = await entries(client, session, "refused_request")
        return found if len(found) >= 3 else None
    assert [e.data["refusal"] for e in await wait_for(recorded)] == ["unsigned", "unregistered_identity", "unsigned"]
    assert await entries(client, session, "operator") == [] and await inv.pending(client, session) is None


def test_a_decision_names_the_exact_code_it_signs():
    decision = OperatorDecision(turn=1, code_hash="ab" * 32, kind=DecisionKind.RUN_ONCE, approver="bob")
    assert decision.signed_body()["code_hash"] == "ab" * 32


async def test_a_refused_request_names_its_nonce_so_a_client_knows_its_own(ops, client, settings, running_worker,
                                                                          brain):
    """A client whose update timed out sends the same signed message again as a signal; the copy is refused as a
    replay. The refusal carries the nonce, so that client (and only it) can tell its copy's refusal from a
    refusal of its message (tests/unit/test_cli_follow.py holds the terminal to it)."""
    from bamboo.investigation.contract import OperatorMessage

    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    signed = ops.alice.sign(inv.Message.MESSAGE, session, OperatorMessage(text="what is the status?", author="alice"))
    for _ in range(2):
        await inv.handle(client, session).signal(inv.Message.MESSAGE, signed)

    async def refused():
        return await entries(client, session, "refused_request")
    [copy] = await wait_for(refused)
    assert copy.data["refusal"] == "replayed" and copy.data["nonce"] == signed.auth.nonce

    async def told():  # the copy is refused when admitted; the message itself is written when its turn starts
        return await entries(client, session, "operator")
    assert [e.text for e in await wait_for(told)] == ["what is the status?"]
