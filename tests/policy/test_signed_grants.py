"""A durable grant counts only with its approver's signed auto-run answer naming it (policy.grants)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bamboo.approvals.keys import LocalKey
from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.code_identity import code_hash
from policy.decisions import DecisionKind, OperatorDecision
from policy.grants import (
    ProcedureGrant, grant_is_revoked, grant_is_signed, grant_term, make_grant, revocation_of, signed_grants,
)
from policy.signing import StatementKind

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
PROC, BODY = "proc__get_task", "return await tools.get_task(task_id=task_id)"
BOB, READER = LocalKey("bob", Ed25519PrivateKey.generate()), LocalKey("reader", Ed25519PrivateKey.generate())
POLICY = DeploymentPolicy(deployment="production", approvers=(
    RegisteredKey(identity="bob", public_key=BOB.public_key, roles=frozenset({Role.APPROVE})),
    RegisteredKey(identity="reader", public_key=READER.public_key, roles=frozenset({Role.REQUEST})),
))


def _grant(key: LocalKey = BOB, term: str = grant_term(PROC, code_hash(BODY)), deployment: str = "production",
           kind: DecisionKind = DecisionKind.AUTO_RUN, signed_at: datetime = NOW, ttl_s: float = 900) -> ProcedureGrant:
    answer = OperatorDecision(turn=2, code_hash=code_hash("await tools.proc__get_task(task_id=task_id)"), kind=kind,
                              approver=key.identity, grants=(term,) if kind is DecisionKind.AUTO_RUN else ())
    auth = key.authorize(StatementKind.DECISION, "s-7", answer.signed_body(), deployment=deployment, now=signed_at,
                         ttl_s=ttl_s)
    [grant] = signed_grants(answer.model_copy(update={"auth": auth}), "s-7", NOW)
    # the row claims PROC on BODY, whatever the signed answer named
    return grant.model_copy(update={"procedure": PROC, "code_hash": code_hash(BODY)})


def test_a_grant_its_approver_signed_counts_long_after_the_signature_expired() -> None:
    grant = _grant()
    assert grant.granted_at + timedelta(days=30) > grant.decision.auth.expires_at  # type: ignore[union-attr]
    assert grant_is_signed(grant, POLICY, NOW)


def test_rows_no_approver_signed_for_this_grant_do_not_count() -> None:
    unsigned = make_grant(PROC, {PROC: BODY}, "bob", NOW)
    assert not grant_is_signed(unsigned, POLICY, NOW)
    assert not grant_is_signed(_grant(term=grant_term("proc__other", code_hash(BODY))), POLICY, NOW)  # another's grant
    assert not grant_is_signed(_grant(deployment="staging"), POLICY, NOW)                          # another deployment
    assert not grant_is_signed(_grant(key=READER), POLICY, NOW)                                     # may not approve
    moved = _grant().model_copy(update={"session_id": "s-8"})
    assert not grant_is_signed(moved, POLICY, NOW)                                                   # another session
    widened = _grant().model_copy(update={"granted_by": "reader"})
    assert not grant_is_signed(widened, POLICY, NOW)


def test_a_revoked_approvers_grants_lapse() -> None:
    without_bob = POLICY.model_copy(update={"approvers": POLICY.approvers[1:]})
    assert not grant_is_signed(_grant(), without_bob, NOW)


def test_a_deployment_without_signatures_keeps_unsigned_grants() -> None:
    open_policy = DeploymentPolicy(rules=ApprovalRules(require_signatures=False))
    assert grant_is_signed(make_grant(PROC, {PROC: BODY}, "bob", NOW), open_policy, NOW)


LONGEST = timedelta(hours=24)  # the deployment's longest signature lifetime (ApprovalRules.max_signature_ttl_s)


def test_a_revocation_covers_every_answer_of_the_term_signed_before_it() -> None:
    """The approver's other answers naming the same grant stay valid after a revocation (another session's, one the
    workflow refused): each signed before the revocation is revoked with it, whatever lifetime it was signed with;
    one signed once a signer's clock could no longer be behind the revocation stands."""
    from policy.grants import grant_again_after

    earlier, revoked = _grant(signed_at=NOW, ttl_s=3600), _grant(signed_at=NOW + timedelta(minutes=10))
    at = NOW + timedelta(minutes=30)
    revocation = revocation_of(revoked, at)
    assert revocation is not None
    assert grant_is_revoked(revoked, [revocation])
    assert grant_is_revoked(earlier, [revocation])
    assert grant_is_revoked(_grant(signed_at=at - timedelta(minutes=1), ttl_s=LONGEST.total_seconds()), [revocation])
    anew = _grant(signed_at=grant_again_after(at))
    assert grant_again_after(at) - at <= timedelta(minutes=5)  # was the longest lifetime: a day with no re-grant
    assert not grant_is_revoked(anew, [revocation])
    other = _grant(term=grant_term("proc__other", code_hash(BODY)), signed_at=NOW)
    assert not grant_is_revoked(other.model_copy(update={"procedure": "proc__other"}), [revocation])


def test_an_answer_signed_for_longer_than_the_deployment_takes_is_no_grant() -> None:
    """The workflow refuses such an answer, but it stays in the session's history: written into the grant row, it
    counted, and a revocation (which covered answers expiring within the longest lifetime) did not cover it."""
    long_lived = _grant(signed_at=NOW, ttl_s=LONGEST.total_seconds() + 3600)
    ahead = _grant(signed_at=NOW + timedelta(days=30))  # dated ahead, it would outlive a revocation made meanwhile
    assert not grant_is_signed(ahead, POLICY, NOW)
    assert grant_is_signed(ahead, POLICY, NOW + timedelta(days=30))
    assert not grant_is_signed(long_lived, POLICY, NOW)
    assert grant_is_signed(_grant(signed_at=NOW, ttl_s=LONGEST.total_seconds()), POLICY, NOW)


def test_a_statement_signed_later_than_the_deployment_s_time_is_refused() -> None:
    """When a statement was signed is what a revocation reads: a signer may not date it after the revocation."""
    from policy.approvers import AuthRefusal, authenticate
    from policy.signing import MAX_CLOCK_SKEW_S

    answer = OperatorDecision(turn=2, code_hash="a" * 64, kind=DecisionKind.RUN_ONCE, approver="bob")
    for ahead, ok in ((MAX_CLOCK_SKEW_S - 1, True), (MAX_CLOCK_SKEW_S + 60, False)):
        auth = BOB.authorize(StatementKind.DECISION, "s-7", answer.signed_body(), deployment="production",
                             now=NOW + timedelta(seconds=ahead), ttl_s=600)
        verdict = authenticate(POLICY, kind=StatementKind.DECISION, session_id="s-7", identity="bob",
                               body=answer.signed_body(), auth=auth, now=NOW)
        assert verdict.ok is ok, verdict.detail
        assert ok or (verdict.refusal is AuthRefusal.SIGNED_LATER and "clock" in verdict.detail)
    backdated = BOB.authorize(StatementKind.DECISION, "s-7", answer.signed_body(), deployment="production", now=NOW,
                              ttl_s=600).model_copy(update={"issued_at": NOW - timedelta(hours=1)})
    assert not authenticate(POLICY, kind=StatementKind.DECISION, session_id="s-7", identity="bob",
                            body=answer.signed_body(), auth=backdated, now=NOW).ok  # the time is signed


def test_an_unsigned_grant_has_no_revocation_record() -> None:
    unsigned = make_grant(PROC, {PROC: BODY}, "bob", NOW)
    assert revocation_of(unsigned, NOW) is None
    assert not grant_is_revoked(unsigned, [revocation_of(_grant(), NOW)])  # type: ignore[list-item]


def test_every_part_of_a_statement_s_times_is_signed() -> None:
    """The times are signed in whole seconds: a fraction carried beside them was not, so a relay could move an
    expiry up to a second later with the signature still valid. A statement holds only what is signed."""
    from policy.signing import Authorization

    answer = OperatorDecision(turn=2, code_hash="a" * 64, kind=DecisionKind.RUN_ONCE, approver="bob")
    auth = BOB.authorize(StatementKind.DECISION, "s-7", answer.signed_body(), deployment="production",
                         now=NOW + timedelta(microseconds=250_000), ttl_s=600)
    relayed = Authorization.model_validate(
        {**auth.model_dump(), "expires_at": auth.expires_at + timedelta(microseconds=999_999)})
    assert relayed.expires_at == auth.expires_at and auth.issued_at.microsecond == 0
