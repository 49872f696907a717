"""Operator decisions: stale or mismatched answers are refused; approver rules decide who may run what."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from policy.approvers import ApproverRules
from policy.code_identity import code_hash
from policy.decisions import (
    ALWAYS_ASK_CHOICES,
    DecisionKind,
    DecisionRefusal,
    OperatorDecision,
    PendingReview,
    validate_decision,
)

HASH = code_hash("await tools.kill_task(7)")
OTHER_HASH = code_hash("await tools.get_task(7)")


def pending(read_only: bool = True, **changes) -> PendingReview:
    return PendingReview(turn=3, code_hash=HASH, requester="requester", read_only=read_only, **changes)


def decision(kind: DecisionKind = DecisionKind.RUN_ONCE, **changes) -> OperatorDecision:
    values = {"turn": 3, "code_hash": HASH, "kind": kind, "approver": "reviewer"}
    if kind is DecisionKind.EDIT:
        values["replacement_code"] = "await tools.get_task(7)"
    values.update(changes)
    return OperatorDecision(**values)


ANYONE = ApproverRules()


def refusal(pending_review, answer, rules=ANYONE):
    verdict = validate_decision(pending_review, answer, rules)
    assert verdict.accepted is (verdict.refusal is None)
    if not verdict.accepted:
        assert verdict.detail
    return verdict.refusal


def test_an_exact_answer_is_accepted() -> None:
    assert refusal(pending(), decision()) is None


def test_nothing_pending() -> None:
    assert refusal(None, decision()) is DecisionRefusal.NOTHING_PENDING


def test_stale_turn() -> None:
    assert refusal(pending(), decision(turn=2)) is DecisionRefusal.STALE_TURN


@pytest.mark.parametrize(
    ("given", "accepted"),
    [
        (HASH, True),
        (HASH[:8], True),
        (HASH[:12].upper(), True),
        (HASH[:7], False),
        (OTHER_HASH, False),
        (OTHER_HASH[:8], False),
    ],
)
def test_hash_must_match_the_pending_code(given: str, accepted: bool) -> None:
    expected = None if accepted else DecisionRefusal.HASH_MISMATCH
    assert refusal(pending(), decision(code_hash=given)) is expected


def test_choices_not_offered_are_refused() -> None:
    always_ask = pending(choices=ALWAYS_ASK_CHOICES)
    assert refusal(always_ask, decision(DecisionKind.AUTO_RUN)) is DecisionRefusal.CHOICE_NOT_OFFERED
    assert refusal(always_ask, decision(DecisionKind.RUN_ONCE)) is None


def test_missing_approver() -> None:
    assert refusal(pending(), decision(approver="  ")) is DecisionRefusal.MISSING_APPROVER


def test_edit_needs_replacement_code_and_only_edit_carries_it() -> None:
    with pytest.raises(ValidationError, match="replacement code"):
        OperatorDecision(turn=1, code_hash=HASH, kind=DecisionKind.EDIT, approver="a", replacement_code=" ")
    with pytest.raises(ValidationError, match="use edit"):
        OperatorDecision(turn=1, code_hash=HASH, kind=DecisionKind.RUN_ONCE, approver="a", replacement_code="x")


RULES = ApproverRules(
    approvers_read_only=("reader", "lead", "requester"),
    approvers_state_changing=("lead", "requester"),
    require_distinct_approver=True,
)

# (approver, read_only, kind) -> expected refusal, under RULES.
APPROVER_CASES = {
    ("reader", True, "runs"): None,
    ("lead", True, "runs"): None,
    ("requester", True, "runs"): None,  # distinct approval is only for state-changing code
    ("stranger", True, "runs"): DecisionRefusal.UNKNOWN_READ_ONLY_APPROVER,
    ("reader", False, "runs"): DecisionRefusal.STATE_CHANGING_APPROVER_NOT_ALLOWED,
    ("lead", False, "runs"): None,
    ("requester", False, "runs"): DecisionRefusal.APPROVER_IS_REQUESTER,
    ("stranger", False, "runs"): DecisionRefusal.STATE_CHANGING_APPROVER_NOT_ALLOWED,
    ("reader", True, "no_run"): None,
    ("requester", False, "no_run"): None,  # withdrawing or editing one's own request is always allowed
    ("lead", False, "no_run"): None,
    ("stranger", True, "no_run"): DecisionRefusal.UNKNOWN_READ_ONLY_APPROVER,
    ("stranger", False, "no_run"): DecisionRefusal.STATE_CHANGING_APPROVER_NOT_ALLOWED,
    ("reader", False, "no_run"): DecisionRefusal.STATE_CHANGING_APPROVER_NOT_ALLOWED,
}
RUNNING = (DecisionKind.RUN_ONCE, DecisionKind.AUTO_RUN, DecisionKind.ALWAYS_ASK)
NOT_RUNNING = (DecisionKind.EDIT, DecisionKind.REJECT)


@pytest.mark.parametrize(
    ("approver", "read_only", "kind"),
    [
        (approver, read_only, kind)
        for (approver, read_only, group) in APPROVER_CASES
        for kind in (RUNNING if group == "runs" else NOT_RUNNING)
    ],
)
def test_approver_rules(approver: str, read_only: bool, kind: DecisionKind) -> None:
    group = "runs" if kind in RUNNING else "no_run"
    expected = APPROVER_CASES[(approver, read_only, group)]
    assert refusal(pending(read_only=read_only), decision(kind, approver=approver), RULES) is expected


@pytest.mark.parametrize(("read_only", "kind"), list(itertools.product((True, False), tuple(DecisionKind))))
def test_empty_lists_mean_anyone(read_only: bool, kind: DecisionKind) -> None:
    rules = ApproverRules(require_distinct_approver=False)
    assert refusal(pending(read_only=read_only), decision(kind, approver="anyone at all"), rules) is None
    assert refusal(pending(read_only=read_only), decision(kind, approver="requester"), rules) is None


def test_distinct_approval_applies_even_when_anyone_may_approve() -> None:
    rules = ApproverRules(require_distinct_approver=True)
    own = refusal(pending(read_only=False), decision(approver="requester"), rules)
    assert own is DecisionRefusal.APPROVER_IS_REQUESTER
    assert refusal(pending(read_only=False), decision(approver="someone else"), rules) is None


def test_rules_come_from_settings_values() -> None:
    from bamboo.settings import Settings

    settings = Settings(approvers_state_changing=["lead"], require_distinct_approver=False)
    rules = ApproverRules.model_validate(settings.model_dump())
    assert rules == ApproverRules(approvers_state_changing=("lead",), require_distinct_approver=False)
