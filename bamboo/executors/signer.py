"""The agent side of a remote command: evaluate it as the executor will, have it approved, sign the envelope.

The signer evaluates the command with the same policy the executor holds, so the envelope names the
normalised argv's digest, the resolved executable and the targets the executor will derive; a policy that
differs between the two sides makes the executor refuse, never run something else. An operator's approval
(``approve``) signs the command's review hash (``policy.envelopes.command_review_hash``) as a decision of the
run's session, with the operator's registered key, exactly as a code review is approved. A capability grant
(``sign_grant``) and its revocation are statements only a pinned administrator's key signs.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta, timezone

from bamboo.approvals.admin import sign_statement
from bamboo.approvals.keys import LocalKey
from policy.capabilities import GrantTerms
from policy.commands import CommandMatch, CommandPolicy, argv_digest, evaluate
from policy.decisions import DecisionKind, OperatorDecision
from policy.envelopes import Channel, DecisionEnvelope, EnvelopeClaims, EnvelopePhase, command_review_hash, envelope_bytes
from policy.signing import StatementKind
from policy.trust_root import SignedStatement
from policy.trust_root import StatementKind as TrustKind

DEFAULT_ENVELOPE_TTL_S = 120
DEFAULT_APPROVAL_TTL_S = 15 * 60


def command_claims(policy: CommandPolicy, tool: str, argv: list[str], *, run_id: str, tool_call_id: str,
                   deployment: str, environment: str, channel: Channel, phase: EnvelopePhase, requester: str,
                   key: LocalKey,
                   ttl_s: float = DEFAULT_ENVELOPE_TTL_S, now: datetime | None = None) -> EnvelopeClaims:
    """The unsigned claims for ``tool argv`` (raises ``CommandDenied`` when the policy refuses it here)."""
    match: CommandMatch = evaluate(policy, tool, argv, environment=environment, channel=channel)
    return claims_of(match, run_id=run_id, tool_call_id=tool_call_id, deployment=deployment, environment=environment,
                     channel=channel, phase=phase, requester=requester, key=key, ttl_s=ttl_s, now=now)


def claims_of(match: CommandMatch, *, run_id: str, tool_call_id: str, deployment: str, environment: str,
              channel: Channel, phase: EnvelopePhase, requester: str, key: LocalKey,
              ttl_s: float = DEFAULT_ENVELOPE_TTL_S, now: datetime | None = None) -> EnvelopeClaims:
    """The unsigned claims for the command the policy normalised to ``match`` (its argv's digest, its targets)."""
    expires = (now or datetime.now(timezone.utc)) + timedelta(seconds=ttl_s)
    return EnvelopeClaims(run_id=run_id, tool_call_id=tool_call_id, deployment=deployment, environment=environment,
                          channel=channel,
                          phase=phase, tool=match.tool, executable=match.executable,
                          argv_digest=argv_digest(match.argv), targets=tuple(match.targets), rule=match.rule,
                          credential=match.credential, secrets=tuple(match.secrets), requester=requester,
                          expires_at=expires, nonce=secrets.token_hex(16), key_id=key.key_id)


def approve(claims: EnvelopeClaims, approver: LocalKey, *, deployment: str, kind: DecisionKind = DecisionKind.RUN_ONCE,
            ttl_s: float = DEFAULT_APPROVAL_TTL_S, now: datetime | None = None) -> OperatorDecision:
    """``approver``'s signed decision approving exactly the command ``claims`` describe, in its run of
    ``deployment`` (the executor's own: its registry's deployment)."""
    unsigned = OperatorDecision(turn=0, code_hash=command_review_hash(claims), kind=kind, approver=approver.identity)
    auth = approver.authorize(StatementKind.COMMAND_APPROVAL, claims.run_id, unsigned.signed_body(),
                              deployment=deployment, ttl_s=ttl_s, now=now)
    return unsigned.model_copy(update={"auth": auth})


def sign(claims: EnvelopeClaims, key: LocalKey) -> DecisionEnvelope:
    """The envelope: ``key``'s Ed25519 signature over the canonical claims (the key id must be ``key``'s)."""
    if claims.key_id != key.key_id:
        claims = claims.model_copy(update={"key_id": key.key_id})
    signature = key.sign(envelope_bytes(claims))
    return DecisionEnvelope(claims=claims, signature=signature)


def sign_grant(admin: LocalKey, *, environment: str, tool: str, rule: str, targets: list[str] | tuple[str, ...],
               max_executions: int, max_repetitions: int, expires_at: datetime, deployment: str,
               grant_id: str | None = None) -> SignedStatement:
    """``admin``'s signed capability grant (subject: a new grant id) for ``deployment``; the body carries every
    term gates 3 and 4 judge, and the administrator as its granter."""
    terms = GrantTerms(environment=environment, tool=tool, rule=rule, targets=tuple(targets),
                       max_executions=max_executions, max_repetitions=max_repetitions, expires_at=expires_at,
                       granted_by=admin.identity)
    return sign_statement(admin, TrustKind.GRANT_CAPABILITY, grant_id or secrets.token_hex(8), terms,
                          deployment=deployment)


def sign_revocation(admin: LocalKey, grant_id: str, *, deployment: str) -> SignedStatement:
    """``admin``'s signed revocation of ``grant_id`` in ``deployment``."""
    return sign_statement(admin, TrustKind.REVOKE_CAPABILITY, grant_id, deployment=deployment)
