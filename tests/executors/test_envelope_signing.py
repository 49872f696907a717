"""The envelope's signature covers every claim, and no other signed statement passes for an envelope."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bamboo.approvals.keys import KeyStore
from bamboo.executors import signer
from policy.envelopes import EnvelopeClaims, EnvelopeRefusal, VerificationKey, command_review_hash, verify_envelope
from policy.signing import DEFAULT_DEPLOYMENT, StatementKind

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def agent(tmp_path):
    return KeyStore(tmp_path).create("agent")


def _keys(agent) -> dict[str, VerificationKey]:
    return {agent.key_id: VerificationKey(kind="agent", identity=agent.identity, public_key=agent.public_key)}


def _claims(agent, **changes) -> EnvelopeClaims:
    values = dict(run_id="run-1", tool_call_id="call-1", deployment=DEFAULT_DEPLOYMENT, environment="prod", channel="rw", phase="interactive",
                  tool="panda_curl", executable="/usr/bin/curl", argv_digest="a" * 64,
                  targets=("panda:task:1",), requester="alice", expires_at=NOW + timedelta(seconds=60),
                  nonce="0" * 32, key_id=agent.key_id)
    values.update(changes)
    return EnvelopeClaims(**values)


CHANGES = {
    "run_id": "run-2", "tool_call_id": "call-2", "deployment": "staging-site", "environment": "staging", "channel": "ro", "phase": "automatic",
    "tool": "config_git", "executable": "/bin/sh", "argv_digest": "b" * 64, "targets": ("panda:task:2",),
    "requester": "bob", "expires_at": NOW + timedelta(seconds=120), "nonce": "1" * 32,
}


@pytest.mark.parametrize("claim", sorted(CHANGES))
def test_changing_any_claim_breaks_the_signature(agent, claim):
    envelope = signer.sign(_claims(agent), agent)
    forged = envelope.model_copy(update={"claims": envelope.claims.model_copy(update={claim: CHANGES[claim]})})
    verdict = verify_envelope(forged, keys=_keys(agent), deployment=forged.claims.deployment,
                              environment=forged.claims.environment,
                              channel=forged.claims.channel, now=NOW)
    assert verdict.refusal is EnvelopeRefusal.BAD_SIGNATURE


def test_the_untampered_envelope_verifies(agent):
    envelope = signer.sign(_claims(agent), agent)
    assert verify_envelope(envelope, keys=_keys(agent), deployment=DEFAULT_DEPLOYMENT, environment="prod", channel="rw",
                           now=NOW).ok


def test_a_signed_operator_statement_is_not_an_envelope(agent):
    """The same key signing a decision over the same run cannot produce bytes that verify as an envelope."""
    claims = _claims(agent)
    auth = agent.authorize(StatementKind.DECISION, claims.run_id, claims.model_dump(mode="json"), now=NOW, deployment=DEFAULT_DEPLOYMENT)
    forged = signer.sign(claims, agent).model_copy(update={"signature": auth.signature})
    assert verify_envelope(forged, keys=_keys(agent), deployment=DEFAULT_DEPLOYMENT, environment="prod", channel="rw",
                           now=NOW).refusal is EnvelopeRefusal.BAD_SIGNATURE


def test_an_approval_names_environment_tool_and_targets_not_only_the_argv(agent):
    base = _claims(agent)
    for claim in ("environment", "tool", "executable", "targets", "channel"):
        assert command_review_hash(base) != command_review_hash(base.model_copy(update={claim: CHANGES[claim]}))


def test_an_envelope_for_another_deployment_is_refused(agent):
    """One key trusted by two deployments' executors: an envelope copied from one's workflow history ran again on
    the other's, whose nonces had never seen it."""
    envelope = signer.sign(_claims(agent, deployment="atlas"), agent)
    verdict = verify_envelope(envelope, keys=_keys(agent), deployment="cms", environment="prod", channel="rw", now=NOW)
    assert verdict.refusal is EnvelopeRefusal.WRONG_DEPLOYMENT and "'atlas'" in verdict.detail
    assert verify_envelope(envelope, keys=_keys(agent), deployment="atlas", environment="prod", channel="rw",
                           now=NOW).ok
