"""Operator decisions: stale or mismatched answers are refused; signatures, roles and the distinct-approver
rule decide who may run what."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from bamboo.approvals.keys import LocalKey
from policy.approvers import ApprovalRules, DeploymentPolicy, RegisteredKey, Role
from policy.code_identity import code_hash
from policy.decisions import (
    ALWAYS_ASK_CHOICES,
    STATE_CHANGING_CHOICES,
    DecisionKind,
    DecisionRefusal,
    OperatorDecision,
    PendingReview,
    validate_decision,
)
from policy.signing import DEFAULT_DEPLOYMENT, StatementKind

HASH = code_hash("await tools.kill_task(7)")
OTHER_HASH = code_hash("await tools.get_task(7)")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
SESSION = "s-1"


def key(identity: str) -> LocalKey:
    return LocalKey(identity, Ed25519PrivateKey.generate())


KEYS = {name: key(name) for name in ("requester", "reviewer", "reader", "console", "outsider")}
ROLES = {
    "requester": {Role.REQUEST},
    "reviewer": {Role.REQUEST, Role.APPROVE, Role.APPROVE_STATE_CHANGING},
    "reader": {Role.APPROVE},
    "console": {Role.FRONT_END},
}
SCOPES = {"console": frozenset({"reviewer"})}  # the console may speak for the reviewer only
POLICY = DeploymentPolicy(approvers=tuple(
    RegisteredKey(identity=name, public_key=KEYS[name].public_key, roles=frozenset(roles),
                  speaks_for=SCOPES.get(name, frozenset()))
    for name, roles in ROLES.items()))
UNSIGNED_OK = DeploymentPolicy(rules=ApprovalRules(require_signatures=False))


def pending(read_only: bool = True, **changes) -> PendingReview:
    values = {"session_id": SESSION, "turn": 3, "code_hash": HASH, "requester": "requester", "read_only": read_only}
    values.update(changes)
    return PendingReview(**values)


def decision(kind: DecisionKind = DecisionKind.RUN_ONCE, signer: str | None = "reviewer", ttl: float = 300,
             **changes) -> OperatorDecision:
    values = {"turn": 3, "code_hash": HASH, "kind": kind, "approver": "reviewer"}
    if kind is DecisionKind.EDIT:
        values["replacement_code"] = "await tools.get_task(7)"
    values.update(changes)
    unsigned = OperatorDecision(**values)
    if signer is None:
        return unsigned
    auth = KEYS[signer].authorize(StatementKind.DECISION, SESSION, unsigned.signed_body(),
                                  identity=unsigned.approver, ttl_s=ttl, now=NOW, deployment=DEFAULT_DEPLOYMENT)
    return unsigned.model_copy(update={"auth": auth})


def refusal(pending_review, answer, policy=POLICY, seen=()):
    verdict = validate_decision(pending_review, answer, policy, now=NOW, seen_nonces=seen)
    assert verdict.accepted is (verdict.refusal is None)
    if not verdict.accepted:
        assert verdict.detail and "\n" not in verdict.detail
    return verdict.refusal


def test_an_exact_signed_answer_is_accepted() -> None:
    assert refusal(pending(), decision()) is None
    assert refusal(pending(read_only=False, choices=STATE_CHANGING_CHOICES), decision()) is None


def test_nothing_pending_and_stale_turn() -> None:
    assert refusal(None, decision()) is DecisionRefusal.NOTHING_PENDING
    assert refusal(pending(), decision(turn=2)) is DecisionRefusal.STALE_TURN


@pytest.mark.parametrize(
    ("given", "accepted"),
    [(HASH, True), (HASH[:8], True), (HASH[:12].upper(), True), (HASH[:7], False), (OTHER_HASH, False),
     (OTHER_HASH[:8], False)],
)
def test_hash_must_match_the_pending_code_when_unsigned(given: str, accepted: bool) -> None:
    expected = None if accepted else DecisionRefusal.HASH_MISMATCH
    assert refusal(pending(), decision(code_hash=given, signer=None), UNSIGNED_OK) is expected


def test_a_signed_decision_names_the_full_hash() -> None:
    assert refusal(pending(), decision(code_hash=HASH[:12])) is DecisionRefusal.PREFIX_IN_SIGNED_DECISION


def test_choices_not_offered_are_refused() -> None:
    always_ask = pending(choices=ALWAYS_ASK_CHOICES)
    assert refusal(always_ask, decision(DecisionKind.AUTO_RUN)) is DecisionRefusal.CHOICE_NOT_OFFERED
    assert refusal(always_ask, decision(DecisionKind.RUN_ONCE)) is None


@pytest.mark.parametrize(("tamper", "expected"), [
    ("unsigned", DecisionRefusal.UNSIGNED),
    ("forged", DecisionRefusal.BAD_SIGNATURE),
    ("other_code", DecisionRefusal.BAD_SIGNATURE),
    ("other_session", DecisionRefusal.BAD_SIGNATURE),
    ("expired", DecisionRefusal.EXPIRED),
    ("too_long", DecisionRefusal.EXPIRY_TOO_FAR),
    ("replayed", DecisionRefusal.REPLAYED),
    ("unregistered_identity", DecisionRefusal.UNREGISTERED_IDENTITY),
    ("unregistered_key", DecisionRefusal.UNREGISTERED_KEY),
    ("someone_else_speaks", DecisionRefusal.NOT_A_FRONT_END),
])
def test_a_decision_that_is_not_genuinely_the_approvers_is_refused(tamper: str, expected: DecisionRefusal) -> None:
    good = decision()
    seen: tuple[str, ...] = ()
    review = pending()
    if tamper == "unsigned":
        answer = decision(signer=None)
    elif tamper == "forged":
        signature = bytearray(base64.b64decode(good.auth.signature))
        signature[0] ^= 1
        answer = good.model_copy(update={"auth": good.auth.model_copy(
            update={"signature": base64.b64encode(bytes(signature)).decode()})})
    elif tamper == "other_code":
        # A signature taken from a decision on other code, pasted onto this one.
        answer = decision(code_hash=OTHER_HASH).model_copy(update={"code_hash": HASH})
        answer = OperatorDecision.model_validate(answer.model_dump())
    elif tamper == "other_session":
        review = pending(session_id="s-2")
        answer = good
    elif tamper == "expired":
        answer = decision(ttl=-1)
    elif tamper == "too_long":
        answer = decision(ttl=30 * 24 * 3600)
    elif tamper == "replayed":
        answer, seen = good, (good.auth.nonce,)
    elif tamper == "unregistered_identity":
        answer = decision(signer="outsider", approver="outsider")
    elif tamper == "unregistered_key":
        impostor = LocalKey("reviewer", Ed25519PrivateKey.generate())
        auth = impostor.authorize(StatementKind.DECISION, SESSION, good.signed_body(), ttl_s=300, now=NOW, deployment=DEFAULT_DEPLOYMENT)
        answer = good.model_copy(update={"auth": auth})
    else:
        answer = decision(signer="reader")  # reader's key claiming to speak for reviewer
    assert refusal(review, answer, seen=seen) is expected


def test_a_command_approval_and_a_code_decision_do_not_answer_for_each_other() -> None:
    """The same approver, session, turn, hash and choice: signed as an executor's command approval it is not an
    answer to the session's code review, and a code decision is not a command approval."""
    unsigned = decision(signer=None)
    as_command = unsigned.model_copy(update={"auth": KEYS["reviewer"].authorize(
        StatementKind.COMMAND_APPROVAL, SESSION, unsigned.signed_body(), ttl_s=300, now=NOW, deployment=DEFAULT_DEPLOYMENT)})
    assert refusal(pending(), as_command) is DecisionRefusal.BAD_SIGNATURE
    verdict = validate_decision(pending(), decision(), POLICY, now=NOW, statement=StatementKind.COMMAND_APPROVAL)
    assert verdict.refusal is DecisionRefusal.BAD_SIGNATURE
    assert validate_decision(pending(), as_command, POLICY, now=NOW, statement=StatementKind.COMMAND_APPROVAL).accepted


def test_a_registered_front_end_may_sign_for_a_registered_person_in_its_scope_only() -> None:
    assert refusal(pending(), decision(signer="console")) is None
    assert refusal(pending(), decision(signer="console", approver="outsider")) is DecisionRefusal.UNREGISTERED_IDENTITY
    # registered, and the console is a registered front end, but nobody put the requester in its scope
    assert refusal(pending(requester="reader"), decision(signer="console", approver="requester")) \
        is DecisionRefusal.OUT_OF_SCOPE


def test_roles_decide_who_may_run_what() -> None:
    state_changing = pending(read_only=False, choices=STATE_CHANGING_CHOICES)
    assert refusal(pending(), decision(signer="reader", approver="reader")) is None
    assert refusal(state_changing, decision(signer="reader", approver="reader")) is \
        DecisionRefusal.APPROVER_NOT_AUTHORISED
    assert refusal(pending(), decision(signer="requester", approver="requester")) is \
        DecisionRefusal.APPROVER_NOT_AUTHORISED


def test_the_requester_may_withdraw_or_edit_but_not_approve_their_own_state_change() -> None:
    mine = pending(read_only=False, choices=STATE_CHANGING_CHOICES, requester="reviewer")
    assert refusal(mine, decision()) is DecisionRefusal.APPROVER_IS_REQUESTER
    assert refusal(mine, decision(DecisionKind.REJECT)) is None
    assert refusal(mine, decision(DecisionKind.EDIT)) is None
    # Read-only code may be approved by its own requester.
    assert refusal(pending(requester="reviewer"), decision()) is None
    relaxed = DeploymentPolicy(rules=ApprovalRules(require_distinct_approver=False), approvers=POLICY.approvers)
    assert refusal(mine, decision(), relaxed) is None


def test_one_key_registered_under_two_names_is_one_person() -> None:
    """An administrator registered one person's key as 'requester' and as 'twin': the person asked for state-changing
    code as one and approved it as the other. Gate 6 refuses this for command approvals; reviews now too."""
    twin = RegisteredKey(identity="twin", public_key=KEYS["requester"].public_key,
                         roles=frozenset({Role.APPROVE_STATE_CHANGING}))
    doubled = POLICY.model_copy(update={"approvers": (*POLICY.approvers, twin)})
    mine = pending(read_only=False, choices=STATE_CHANGING_CHOICES)
    unsigned = decision(approver="twin", signer=None)
    as_twin = LocalKey("twin", KEYS["requester"].private_key).authorize(
        StatementKind.DECISION, SESSION, unsigned.signed_body(), ttl_s=300, now=NOW, deployment=DEFAULT_DEPLOYMENT)
    answer = unsigned.model_copy(update={"auth": as_twin})
    assert refusal(mine, answer, doubled) is DecisionRefusal.APPROVER_IS_REQUESTER
    assert refusal(pending(choices=STATE_CHANGING_CHOICES), answer, doubled) is None  # read-only: may approve own
    assert refusal(mine, decision(), doubled) is None  # another person's key approves it


def test_state_changing_code_from_the_store_runs_for_nobody_before_its_requester_accepted_it() -> None:
    """An approver who could write the store planted a kill under a harmless question's words; reuse proposed it
    for someone else's question and he, not its requester, approved it alone. The requester's run answer is now
    their acceptance (it runs nothing), and before it no one's run answer counts."""
    key, other = "ab" * 32, "cd" * 32
    stored = pending(read_only=False, choices=STATE_CHANGING_CHOICES, from_store=True, review=key)
    assert refusal(stored, decision(review=key)) is DecisionRefusal.REQUESTER_NOT_ACCEPTED
    assert refusal(stored, decision(DecisionKind.ALWAYS_ASK, review=key)) is DecisionRefusal.REQUESTER_NOT_ACCEPTED
    accepting = decision(signer="requester", approver="requester", review=key)
    verdict = validate_decision(stored, accepting, POLICY, now=NOW)
    assert verdict.accepted and verdict.acceptance and verdict.signed  # asking for code is role enough to accept it
    accepted = stored.model_copy(update={"accepted": key})
    assert refusal(accepted, decision(review=key)) is None
    assert not validate_decision(accepted, decision(review=key), POLICY, now=NOW).acceptance
    assert refusal(accepted, accepting) is DecisionRefusal.APPROVER_NOT_AUTHORISED  # accepting is not approving
    # the acceptance names the review it answered: on another review it holds nothing
    moved = accepted.model_copy(update={"review": other})
    assert refusal(moved, decision(review=other)) is DecisionRefusal.REQUESTER_NOT_ACCEPTED
    # a requester who may approve state changes accepts with the same answer; approving stays someone else's
    theirs = stored.model_copy(update={"requester": "reviewer"})
    assert validate_decision(theirs, decision(review=key), POLICY, now=NOW).acceptance
    assert refusal(theirs.model_copy(update={"accepted": key}), decision(review=key)) is \
        DecisionRefusal.APPROVER_IS_REQUESTER
    relaxed = DeploymentPolicy(rules=ApprovalRules(require_distinct_approver=False), approvers=POLICY.approvers)
    runs = validate_decision(theirs, decision(review=key), relaxed, now=NOW)
    assert runs.accepted and not runs.acceptance  # where requesters approve their own changes, their answer runs it
    # unchanged: rejecting, editing, and read-only code from the store
    assert refusal(stored, decision(DecisionKind.REJECT)) is None
    assert refusal(stored, decision(DecisionKind.EDIT)) is None
    assert refusal(pending(from_store=True, review=key), decision(review=key)) is None


def test_identities_differing_only_in_case_are_one_person() -> None:
    """Issue: 'Requester' approved the code 'requester' asked for, and it ran."""
    mine = pending(read_only=False, choices=STATE_CHANGING_CHOICES, requester="reviewer")
    assert refusal(mine, decision(approver="Reviewer", signer="reviewer")) is DecisionRefusal.APPROVER_IS_REQUESTER
    assert refusal(mine, decision(approver="REVIEWER ", signer=None),
                   DeploymentPolicy(rules=ApprovalRules(require_signatures=False))) is \
        DecisionRefusal.APPROVER_IS_REQUESTER
    with pytest.raises(ValidationError):  # a look-alike is refused, not folded into the person (test_identity.py)
        OperatorDecision(turn=1, code_hash=HASH, kind="run_once", approver="Ａlice")


@pytest.mark.parametrize("approver", ["", "a" * 65, "al ice", "аlice", "alice\x00", "x" * (1024 * 1024)])
def test_invalid_identities_are_refused_at_the_boundary(approver: str) -> None:
    with pytest.raises(ValidationError):
        OperatorDecision(turn=1, code_hash=HASH, kind="run_once", approver=approver)


def test_edit_needs_replacement_and_only_edit_carries_one() -> None:
    with pytest.raises(ValidationError):
        OperatorDecision(turn=1, code_hash=HASH, kind=DecisionKind.EDIT, approver="x")
    with pytest.raises(ValidationError):
        OperatorDecision(turn=1, code_hash=HASH, kind=DecisionKind.RUN_ONCE, approver="x", replacement_code="y")


def test_unsigned_decisions_with_signatures_off_follow_the_registry_when_it_has_entries() -> None:
    relaxed = DeploymentPolicy(rules=ApprovalRules(require_signatures=False), approvers=POLICY.approvers)
    assert refusal(pending(), decision(signer=None), relaxed) is None
    assert refusal(pending(), decision(signer=None, approver="outsider"), relaxed) is \
        DecisionRefusal.APPROVER_NOT_AUTHORISED
    assert refusal(pending(), decision(signer=None, approver="anyone"), UNSIGNED_OK) is None


def test_the_policy_version_changes_with_rules_and_keys() -> None:
    other_rules = DeploymentPolicy(rules=ApprovalRules(require_distinct_approver=False), approvers=POLICY.approvers)
    fewer = DeploymentPolicy(approvers=POLICY.approvers[1:])
    versions = {POLICY.version, other_rules.version, fewer.version}
    assert len(versions) == 3
    assert DeploymentPolicy(approvers=tuple(reversed(POLICY.approvers))).version == POLICY.version


def test_a_signature_is_bound_to_the_time_it_was_made_for() -> None:
    answer = decision(ttl=60)
    later = NOW + timedelta(seconds=61)
    verdict = validate_decision(pending(), answer, POLICY, now=later)
    assert verdict.refusal is DecisionRefusal.EXPIRED


def test_a_decision_signed_for_another_deployment_is_refused() -> None:
    """Review finding: sessions are named by their requesters, so staging's session "inc-42" and production's can
    share a name; an approver registered in both with one key approved code in staging, and the signed decision,
    copied from staging's history, ran the same code in production (whose nonces had never seen it)."""
    staging, production = (POLICY.model_copy(update={"deployment": name}) for name in ("staging", "production"))
    unsigned = OperatorDecision(turn=3, code_hash=HASH, kind=DecisionKind.RUN_ONCE, approver="reviewer")
    auth = KEYS["reviewer"].authorize(StatementKind.DECISION, SESSION, unsigned.signed_body(), ttl_s=300, now=NOW,
                                      deployment="staging")
    signed_in_staging = unsigned.model_copy(update={"auth": auth})
    assert refusal(pending(), signed_in_staging, staging) is None
    assert refusal(pending(), signed_in_staging, production) is DecisionRefusal.BAD_SIGNATURE
    verdict = validate_decision(pending(), signed_in_staging, production, now=NOW)
    assert "'production'" in verdict.detail and "BAMBOO_DEPLOYMENT" in verdict.detail
    assert staging.version != production.version  # the audited policy says which deployment judged


def test_an_auto_run_answer_names_exactly_the_grants_the_review_leaves() -> None:
    """The grants are signed with the answer (so a grant row counts only with its approver's signature): an answer
    naming fewer, more or other grants than the review offers is refused before anything is kept."""
    offered = pending(grants=("proc__a@" + "1" * 64,))
    assert refusal(offered, decision(DecisionKind.AUTO_RUN, grants=("proc__a@" + "1" * 64,))) is None
    for named in ((), ("proc__a@" + "2" * 64,), ("proc__a@" + "1" * 64, "proc__b@" + "1" * 64)):
        assert refusal(offered, decision(DecisionKind.AUTO_RUN, grants=named)) is DecisionRefusal.GRANTS_NOT_OFFERED
    with pytest.raises(ValidationError):
        OperatorDecision(turn=3, code_hash=HASH, kind=DecisionKind.RUN_ONCE, approver="reviewer", grants=("p@h",))


def test_an_answer_runs_only_the_review_it_was_given_to() -> None:
    """The same code can be reviewed again in its turn with other procedure bodies pinned, another verdict or other
    tools (an edit and its undo re-read rows a requester may write): the answer names the review's digest, signed."""
    from policy.decisions import review_digest

    facts = {"run": "first-run-id", "code_hash": HASH, "read_only": True, "choices": (DecisionKind.RUN_ONCE, DecisionKind.REJECT),
             "grants": (), "allow_set": ("proc__x",), "procedure_hashes": {"proc__x": "1" * 64},
             "read_only_tools": ("get_task",)}
    first = review_digest(**facts)  # type: ignore[arg-type]
    for change in ({"procedure_hashes": {"proc__x": "2" * 64}}, {"read_only": False}, {"allow_set": ("kill",)},
                   {"read_only_tools": ()}, {"grants": ("proc__x@" + "1" * 64,)}, {"choices": (DecisionKind.REJECT,)},
                   {"run": "another-run-of-the-same-session-id"}):
        assert review_digest(**{**facts, **change}) != first, change  # type: ignore[arg-type]
    again = "9" * 64
    assert refusal(pending(review=first), decision(review=first)) is None
    assert refusal(pending(review=again), decision(review=first)) is DecisionRefusal.REVIEW_CHANGED
    assert refusal(pending(review=again), decision(DecisionKind.REJECT, review=first)) is None  # runs nothing
    signed = decision(review=first)
    forged = signed.model_copy(update={"review": again})  # the signature covers the review named
    assert refusal(pending(review=again), forged) is DecisionRefusal.BAD_SIGNATURE
    with pytest.raises(ValidationError):
        OperatorDecision(turn=3, code_hash=HASH, kind=DecisionKind.RUN_ONCE, approver="reviewer", review="ab")


def test_a_requester_without_roles_cannot_accept_a_stored_procedure() -> None:
    """Review: a requester whose roles were all removed after asking (key still registered) accepted a stored kill,
    and the acceptance let another approver run it; the same person's rejection of another's code was refused."""
    key = "ab" * 32
    stored = pending(read_only=False, choices=STATE_CHANGING_CHOICES, from_store=True, review=key)
    stripped = DeploymentPolicy(approvers=tuple(
        a.model_copy(update={"roles": frozenset()}) if a.identity == "requester" else a for a in POLICY.approvers))
    accepting = decision(signer="requester", approver="requester", review=key)
    verdict = validate_decision(stored, accepting, stripped, now=NOW)
    assert not verdict.accepted and verdict.refusal is DecisionRefusal.APPROVER_NOT_AUTHORISED
    assert validate_decision(stored, accepting, POLICY, now=NOW).acceptance  # with the request role, it accepts
