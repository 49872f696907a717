"""Executors know who signed: each trusted key names a person or the agent, and a person's key may claim only
that person's own requests, in the ``operator`` phase; the agent's key claims the phases of generated code for
any requester. Through a real executor, counted on the PanDA simulator."""

from __future__ import annotations

import pytest

from bamboo.executors.config import keyed
from tests.executors.conftest import kill_target
from tests.executors.test_write_gates import assert_gate


def people(h):
    """An executor configuration trusting the agent and alice (the requester) as a person."""
    return {"verification_keys": keyed([h.agent_key(), h.person_key(h.requester)])}


async def test_a_person_key_claiming_another_requester_is_refused(harness):
    """The hole: alice signs an envelope naming someone else as requester, approves it herself, and the
    distinct-approver rule of gate 6 saw two people."""
    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv(), key=h.requester, requester="nobody-else", phase="operator")
    envelope = h.sign(h.approved(claims, h.requester), h.requester)
    async with h.executor(h.config("prod", "rw", **people(h))):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert err.type == "envelope.requester_not_signer", err
    assert "sign with requester alice" in str(err) and "\n" not in str(err)
    assert h.kills_on_server() == 0
    assert ("executor_refused", "envelope.requester_not_signer") in await h.audit_kinds()


@pytest.mark.parametrize("phase", ["interactive", "automatic"])
async def test_a_person_key_may_not_claim_a_phase_of_generated_code(harness, phase):
    h = harness
    argv = h.status_argv()
    envelope = h.sign(h.claims("staging", "ro", argv, key=h.requester, phase=phase), h.requester)
    async with h.executor(h.config("staging", "ro", **people(h))):
        err = await h.refusal("staging", "ro", "panda_curl", argv, envelope)
    assert err.type == "envelope.phase_not_for_key", err
    assert "phase 'operator'" in str(err)


async def test_a_person_key_runs_their_own_command_as_operator(harness):
    h = harness
    argv = h.status_argv()
    envelope = h.sign(h.claims("staging", "ro", argv, key=h.requester, phase="operator"), h.requester)
    async with h.executor(h.config("staging", "ro", **people(h))):
        result = await h.call("staging", "ro", "panda_curl", argv, envelope)
    assert result.outcome.exit_code == 0 and "running" in result.outcome.stdout, result.outcome


async def test_a_person_key_writes_with_a_grant_and_another_persons_approval(harness):
    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv(), key=h.requester, phase="operator")
    async with h.executor(h.config("prod", "rw", **people(h))):
        result = await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(claims), h.requester))
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert h.kills_on_server() == 1


async def test_a_person_cannot_approve_their_own_signed_write(harness):
    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv(), key=h.requester, phase="operator")
    envelope = h.sign(h.approved(claims, h.requester), h.requester)
    async with h.executor(h.config("prod", "rw", **people(h))):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 6, "approval")
    assert "the key that signed the request" in str(err)
    assert h.kills_on_server() == 0


async def test_the_agent_key_may_not_claim_the_operator_phase(harness):
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("staging", "ro", **people(h))):
        err = await h.refusal("staging", "ro", "panda_curl", argv, h.sign(h.claims("staging", "ro", argv,
                                                                                    phase="operator")))
    assert err.type == "envelope.phase_not_for_key", err


async def test_the_agent_key_signs_for_the_sessions_requester(harness):
    """The worker knows its session's requester: the agent's envelope may name anyone, and a write still
    needs an approval by someone other than that requester."""
    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv(), requester="nobody-else")
    async with h.executor(h.config("prod", "rw", **people(h))):
        result = await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(claims)))
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert h.kills_on_server() == 1
