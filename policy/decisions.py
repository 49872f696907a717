"""Operator decisions on a pending review, and whether one may be accepted.

A decision names the turn and the code hash it answers, so an answer typed against an earlier prompt
(or against code that has since been edited) cannot approve whatever happens to be pending now. Every
refusal carries a machine-readable reason and a sentence for the operator.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policy.approvers import ApproverRules

MIN_DECISION_HASH_PREFIX = 8


class DecisionKind(str, Enum):
    RUN_ONCE = "run_once"
    AUTO_RUN = "auto_run"
    ALWAYS_ASK = "always_ask"
    EDIT = "edit"
    REJECT = "reject"

    @property
    def runs_code(self) -> bool:
        """Kinds that execute the pending code now; only these are subject to the approver lists."""
        return self in (DecisionKind.RUN_ONCE, DecisionKind.AUTO_RUN, DecisionKind.ALWAYS_ASK)


ALL_CHOICES: tuple[DecisionKind, ...] = tuple(DecisionKind)
ALWAYS_ASK_CHOICES: tuple[DecisionKind, ...] = (DecisionKind.RUN_ONCE, DecisionKind.EDIT, DecisionKind.REJECT)


class DecisionRefusal(str, Enum):
    NOTHING_PENDING = "nothing_pending"
    STALE_TURN = "stale_turn"
    HASH_MISMATCH = "hash_mismatch"
    CHOICE_NOT_OFFERED = "choice_not_offered"
    MISSING_APPROVER = "missing_approver"
    UNKNOWN_READ_ONLY_APPROVER = "unknown_read_only_approver"
    STATE_CHANGING_APPROVER_NOT_ALLOWED = "state_changing_approver_not_allowed"
    APPROVER_IS_REQUESTER = "approver_is_requester"


class PendingReview(BaseModel):
    """What is waiting for an answer. ``read_only`` is the recomputed verdict (opaque code counts as False)."""

    model_config = ConfigDict(frozen=True)

    turn: int
    code_hash: str = Field(min_length=1)
    requester: str
    read_only: bool
    choices: tuple[DecisionKind, ...] = ALL_CHOICES


class OperatorDecision(BaseModel):
    """One operator's answer. ``code_hash`` may be the full hash or a prefix of at least 8 characters."""

    model_config = ConfigDict(frozen=True)

    turn: int
    code_hash: str = Field(min_length=1)
    kind: DecisionKind
    approver: str
    replacement_code: str | None = None

    @model_validator(mode="after")
    def _replacement_only_for_edit(self) -> "OperatorDecision":
        if self.kind is DecisionKind.EDIT and not (self.replacement_code or "").strip():
            raise ValueError("an edit decision needs the replacement code")
        if self.kind is not DecisionKind.EDIT and self.replacement_code is not None:
            raise ValueError(f"a {self.kind.value} decision carries no replacement code; use edit to change the code")
        return self


class DecisionVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    accepted: bool
    refusal: DecisionRefusal | None = None
    detail: str = ""

    @classmethod
    def accept(cls) -> "DecisionVerdict":
        return cls(accepted=True)

    @classmethod
    def refuse(cls, refusal: DecisionRefusal, detail: str) -> "DecisionVerdict":
        return cls(accepted=False, refusal=refusal, detail=detail)


def hash_answers(given: str, pending_hash: str) -> bool:
    """The full hash, or an unambiguous-enough prefix of it (at least 8 characters, any case)."""
    given = given.strip().lower()
    if len(given) < MIN_DECISION_HASH_PREFIX and given != pending_hash.lower():
        return False
    return pending_hash.lower().startswith(given)


def validate_decision(
    pending: PendingReview | None, decision: OperatorDecision, rules: ApproverRules
) -> DecisionVerdict:
    """Accept ``decision`` as the answer to ``pending``, or say why not.

    Checks run from "is this even an answer to what is pending" to "may this person give it". Rejecting or
    editing is open to the requester as well as the listed approvers (withdrawing one's own request, or
    sending changed code back through review, never runs anything); deciding to run the code requires an
    approver on the list for its class, distinct from the requester for state-changing code when configured.
    """
    if pending is None:
        return DecisionVerdict.refuse(
            DecisionRefusal.NOTHING_PENDING, "Nothing is waiting for approval in this session."
        )
    if decision.turn != pending.turn:
        return DecisionVerdict.refuse(
            DecisionRefusal.STALE_TURN,
            f"This decision answers turn {decision.turn}, but turn {pending.turn} is the one waiting; "
            "look at the pending review again and answer that one.",
        )
    if not hash_answers(decision.code_hash, pending.code_hash):
        return DecisionVerdict.refuse(
            DecisionRefusal.HASH_MISMATCH,
            f"Code hash {decision.code_hash!r} does not match the pending code {pending.code_hash[:12]}; "
            f"the code may have changed since you looked (give at least {MIN_DECISION_HASH_PREFIX} characters).",
        )
    if decision.kind not in pending.choices:
        offered = ", ".join(choice.value for choice in pending.choices)
        return DecisionVerdict.refuse(
            DecisionRefusal.CHOICE_NOT_OFFERED,
            f"{decision.kind.value} is not offered for this code; choose one of: {offered}.",
        )
    approver = decision.approver.strip()
    requester = pending.requester.strip()
    if not approver:
        return DecisionVerdict.refuse(DecisionRefusal.MISSING_APPROVER, "A decision must name who makes it.")
    state_changing = not pending.read_only
    if not decision.kind.runs_code and approver == requester:
        return DecisionVerdict.accept()
    if not rules.may_approve(approver, state_changing):
        if state_changing:
            return DecisionVerdict.refuse(
                DecisionRefusal.STATE_CHANGING_APPROVER_NOT_ALLOWED,
                f"{approver} may not approve state-changing code; "
                f"ask one of: {', '.join(rules.approvers_state_changing)}.",
            )
        return DecisionVerdict.refuse(
            DecisionRefusal.UNKNOWN_READ_ONLY_APPROVER,
            f"{approver} is not an approver for read-only code; ask one of: {', '.join(rules.approvers_read_only)}.",
        )
    if decision.kind.runs_code and rules.needs_distinct_approver(state_changing) and approver == requester:
        return DecisionVerdict.refuse(
            DecisionRefusal.APPROVER_IS_REQUESTER,
            "State-changing code needs approval from someone other than the person who asked for it.",
        )
    return DecisionVerdict.accept()
