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
                  targets=("panda:task:1",), rule="panda_task_kill", credential="panda_rw", requester="alice", expires_at=NOW + timedelta(seconds=60),
                  nonce="0" * 32, key_id=agent.key_id)
    values.update(changes)
    return EnvelopeClaims(**values)


CHANGES = {
    "run_id": "run-2", "tool_call_id": "call-2", "deployment": "staging-site", "environment": "staging", "channel": "ro", "phase": "automatic",
    "tool": "config_git", "executable": "/bin/sh", "argv_digest": "b" * 64, "targets": ("panda:task:2",),
    "rule": "panda_task_read", "credential": "panda_ro", "secrets": ("PANDA_AUTH_TOKEN",), "requester": "bob", "expires_at": NOW + timedelta(seconds=120), "nonce": "1" * 32,
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


def _two_families():
    """One tool, two read rules alike but for their credential family: a declaration selects between them."""
    import shutil

    from policy.commands import CommandPolicy, CommandRule, CommandTool, PositionalSpec

    word = PositionalSpec(name="v", value="text", pattern="[A-Z_]+", optional=True)
    rules = [CommandRule(name=name, tool="probe", access="read", environments=["staging"], channel="ro",
                         credential=family, positionals=[word])
             for name, family in (("plain", "ro_plain"), ("power", "ro_power"))]
    return CommandPolicy(tools=[CommandTool(name="probe", executable=shutil.which("printenv") or "/usr/bin/printenv")],
                         rules=rules, credentials={"ro_plain": ["PANDA_AUTH_TOKEN"], "ro_power": ["PANDA_POWER_TOKEN"]})


def test_an_envelope_binds_the_rule_and_the_credential_the_digest_leaves_out(agent):
    """`{{secret:NAME}}` is taken out before the argv's digest: adding one to the unsigned request argv picked
    another rule with another credential family, and the envelope signed for the first rule verified for it."""
    from policy.commands import argv_digest, evaluate
    from policy.envelopes import verify_request

    policy = _two_families()
    signed = evaluate(policy, "probe", ["printenv", "X"], environment="staging", channel="ro")
    relayed = evaluate(policy, "probe", ["printenv", "{{secret:PANDA_POWER_TOKEN}}", "X"], environment="staging",
                       channel="ro")
    assert argv_digest(signed.argv) == argv_digest(relayed.argv) and (signed.rule, relayed.rule) == ("plain", "power")
    claims = signer.claims_of(signed, run_id="run-1", tool_call_id="call-1", deployment=DEFAULT_DEPLOYMENT,
                              environment="staging", channel="ro", phase="automatic", requester="agent", key=agent)
    assert (claims.rule, claims.credential, claims.secrets) == ("plain", "ro_plain", ())

    def verdict(match):
        return verify_request(claims, tool=match.tool, executable=match.executable, argv_digest=argv_digest(match.argv),
                              targets=match.targets, rule=match.rule, credential=match.credential, secrets=match.secrets)

    assert verdict(signed).ok
    assert verdict(relayed).refusal is EnvelopeRefusal.RULE_MISMATCH
    declared = evaluate(policy, "probe", ["printenv", "{{secret:PANDA_AUTH_TOKEN}}", "X"], environment="staging",
                        channel="ro")  # the same rule and family, one more declaration
    assert declared.rule == "plain" and verdict(declared).refusal is EnvelopeRefusal.CREDENTIAL_MISMATCH
    base = _claims(agent)
    for claim, value in (("rule", "other"), ("credential", "other"), ("secrets", ("OTHER",))):
        assert command_review_hash(base) != command_review_hash(base.model_copy(update={claim: value}))
