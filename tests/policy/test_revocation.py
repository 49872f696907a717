"""``/revoke <hash-prefix|proc-name|all>`` planning."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from policy.grants import CodePolicy, ProcedureGrant, SessionPolicy
from policy.revocation import plan_revocation

AT = datetime(2026, 11, 30, tzinfo=timezone.utc)
SHARED = "abcd1111" + "0" * 56
POLICIES = {
    SHARED: SessionPolicy(policy=CodePolicy.AUTO_RUN),
    "abcd2222" + "0" * 56: SessionPolicy(policy=CodePolicy.ALWAYS_ASK),
    "ffff0000" + "0" * 56: SessionPolicy(policy=CodePolicy.AUTO_RUN),
}
GRANTS = {
    "proc__get_jobs__get_task": ProcedureGrant(
        procedure="proc__get_jobs__get_task", code_hash=SHARED, granted_by="a", granted_at=AT
    ),
    "proc__get_logs__get_task": ProcedureGrant(
        procedure="proc__get_logs__get_task", code_hash="9999" + "0" * 60, granted_by="a", granted_at=AT
    ),
}


def test_all_removes_everything() -> None:
    plan = plan_revocation(" ALL ", POLICIES, GRANTS)
    assert plan.ok
    assert plan.session_hashes == tuple(sorted(POLICIES))
    assert plan.procedures == tuple(sorted(GRANTS))


def test_a_unique_hash_prefix_removes_the_policy_and_any_grant_for_that_code() -> None:
    plan = plan_revocation("ABCD1", POLICIES, GRANTS)
    assert plan.ok
    assert plan.session_hashes == (SHARED,)
    assert plan.procedures == ("proc__get_jobs__get_task",)
    assert plan_revocation("9999", POLICIES, GRANTS).procedures == ("proc__get_logs__get_task",)


def test_an_ambiguous_hash_prefix_says_which_hashes_matched() -> None:
    plan = plan_revocation("abcd", POLICIES, GRANTS)
    assert not plan.ok
    assert plan.matches == (SHARED, "abcd2222" + "0" * 56)
    assert SHARED in (plan.error or "") and "ambiguous" in (plan.error or "")
    assert plan.session_hashes == () and plan.procedures == ()


def test_procedure_names() -> None:
    assert plan_revocation("proc__get_jobs__get_task", POLICIES, GRANTS).procedures == ("proc__get_jobs__get_task",)
    assert plan_revocation("proc__get_l", POLICIES, GRANTS).procedures == ("proc__get_logs__get_task",)
    ambiguous = plan_revocation("proc__get", POLICIES, GRANTS)
    assert not ambiguous.ok and ambiguous.matches == tuple(sorted(GRANTS))
    assert plan_revocation("proc__nothing", POLICIES, GRANTS).whole == ("proc__nothing",)


@pytest.mark.parametrize(
    ("target", "fragment"),
    [("", "Say what"), ("abc", "at least 4"), ("xyz123", "hex"), ("1234", "No session policy")],
)
def test_unusable_targets_explain_themselves(target: str, fragment: str) -> None:
    plan = plan_revocation(target, POLICIES, GRANTS)
    assert not plan.ok and fragment in (plan.error or "")
    assert plan.session_hashes == () and plan.procedures == ()


def test_a_stored_procedure_is_revoked_whole_even_with_no_grant_in_force() -> None:
    """A grant row a requester broke beforehand is no grant in force, so the revoke found nothing and said so; the
    row written back afterwards made its answer count again. Naming the procedure revokes every answer naming it,
    stored or not (the requester may hide the procedure's row too)."""
    plan = plan_revocation("proc__broken_row", POLICIES, GRANTS)
    assert plan.ok and plan.procedures == () and plan.whole == ("proc__broken_row",)
    assert plan_revocation("proc__get_jobs__get_task", POLICIES, GRANTS).whole == ("proc__get_jobs__get_task",)
    assert plan_revocation(" all ", POLICIES, GRANTS).every


def test_a_whole_revocation_covers_every_code_of_its_procedure_and_every_covers_all() -> None:
    from datetime import timedelta

    from bamboo.approvals.keys import LocalKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from policy.decisions import DecisionKind, OperatorDecision
    from policy.grants import grant_is_revoked, grant_term, revocation_of_procedures
    from policy.signing import StatementKind

    bob = LocalKey("bob", Ed25519PrivateKey.generate())

    def grant(procedure: str, code: str, at: datetime) -> ProcedureGrant:
        term = grant_term(procedure, code)
        answer = OperatorDecision(turn=1, code_hash="a" * 64, kind=DecisionKind.AUTO_RUN, approver="bob", grants=(term,))
        auth = bob.authorize(StatementKind.DECISION, "s", answer.signed_body(), deployment="d", now=at)
        return ProcedureGrant(procedure=procedure, code_hash=code, granted_by="bob", granted_at=at, session_id="s",
                              decision=answer.model_copy(update={"auth": auth}))

    whole = revocation_of_procedures(["proc__a"], False, AT)
    assert grant_is_revoked(grant("proc__a", "1" * 64, AT - timedelta(days=3)), whole)
    assert grant_is_revoked(grant("proc__a", "2" * 64, AT), whole)
    assert not grant_is_revoked(grant("proc__b", "1" * 64, AT), whole)
    assert not grant_is_revoked(grant("proc__a", "1" * 64, AT + timedelta(minutes=5)), whole)
    every = revocation_of_procedures([], True, AT)
    assert grant_is_revoked(grant("proc__b", "1" * 64, AT), every)
