"""Operator decisions on a pending review, and whether one may be accepted.

A decision names the turn and the code hash it answers, so an answer typed against an earlier prompt
(or against code that has since been edited) cannot approve whatever happens to be pending now, and the
review it answers (``review_digest``): one turn's code can be reviewed again with the same hash but another
verdict (an edit and its undo re-read the stored procedures it calls, rows a requester may write). It is
signed by the person giving it (``policy.signing``), checked against the deployment's registry and rules
(``policy.approvers``), and every refusal carries a machine-readable reason and a sentence for the operator.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Iterable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policy.approvers import AuthRefusal, DeploymentPolicy, Role, authenticate
from policy.code_identity import HASH_HEX_LENGTH
from policy.identity import Identity
from policy.signing import Authorization, StatementKind, text_digest

MIN_DECISION_HASH_PREFIX = 8
MAX_REPLACEMENT_CODE_CHARS = 64 * 1024
# Durable grants one auto-run answer may leave (one per stored procedure the turn replays).
MAX_GRANTS = 64
REVIEW_PATTERN = r"^([0-9a-f]{64})?$"  # pydantic (Rust regex): "$" is the end of the text


def review_digest(*, run: str, code_hash: str, read_only: bool, choices: Sequence[DecisionKind], grants: Sequence[str],
                  allow_set: Sequence[str], procedure_hashes: Mapping[str, str], read_only_tools: Sequence[str]) -> str:
    """The identity of one published review: SHA-256 over the session's run and what its approval lets run
    beyond the code itself — the tools bridged in, the stored procedure bodies pinned by hash, the tools held
    read-only, the verdict, the answers offered and the grants an auto-run answer leaves. An edit and its undo
    bring the same code back in the same turn, reviewed again against procedure rows a requester may have
    rewritten meanwhile; a decision naming only the turn and code hash then approved a review its approver
    never saw.

    ``run`` is the session workflow's first run id, which the server picks when the session starts. Without it
    the key of a review was the same in every session, so a requester could start a workflow of their own under
    a session id nobody used yet (on a queue no worker of ours polls), publish a review of state-changing code
    under that key as "read-only", take the approval an approver signed there, and replay it, still valid, into
    a real session they then started under the same id with that code pending. A key that names the run holds
    only in the run that published it."""
    subject = {"run": run, "code_hash": code_hash.lower(), "read_only": read_only,
               "choices": sorted(c.value for c in choices),
               "grants": sorted(grants), "allow_set": sorted(allow_set), "procedures": dict(sorted(procedure_hashes.items())),
               "read_only_tools": sorted(read_only_tools)}
    canonical = json.dumps(subject, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


class DecisionKind(str, Enum):
    RUN_ONCE = "run_once"
    AUTO_RUN = "auto_run"
    ALWAYS_ASK = "always_ask"
    EDIT = "edit"
    REJECT = "reject"

    @property
    def runs_code(self) -> bool:
        """Kinds that execute the pending code now; only these need an approver's role."""
        return self in (DecisionKind.RUN_ONCE, DecisionKind.AUTO_RUN, DecisionKind.ALWAYS_ASK)


ALL_CHOICES: tuple[DecisionKind, ...] = tuple(DecisionKind)
ALWAYS_ASK_CHOICES: tuple[DecisionKind, ...] = (DecisionKind.RUN_ONCE, DecisionKind.EDIT, DecisionKind.REJECT)
# Auto-run is never offered for state-changing or unanalysable code: no standing permission covers it.
STATE_CHANGING_CHOICES: tuple[DecisionKind, ...] = tuple(k for k in DecisionKind if k is not DecisionKind.AUTO_RUN)


class DecisionRefusal(str, Enum):
    NOTHING_PENDING = "nothing_pending"
    STALE_TURN = "stale_turn"
    HASH_MISMATCH = "hash_mismatch"
    CHOICE_NOT_OFFERED = "choice_not_offered"
    PREFIX_IN_SIGNED_DECISION = "prefix_in_signed_decision"
    GRANTS_NOT_OFFERED = "grants_not_offered"
    REVIEW_CHANGED = "review_changed"
    APPROVER_NOT_AUTHORISED = "approver_not_authorised"
    APPROVER_IS_REQUESTER = "approver_is_requester"
    REQUESTER_NOT_ACCEPTED = "requester_not_accepted"
    MALFORMED = "malformed"
    # Authentication failures keep the names policy.approvers gives them.
    UNSIGNED = AuthRefusal.UNSIGNED.value
    REPLAYED = AuthRefusal.REPLAYED.value
    EXPIRED = AuthRefusal.EXPIRED.value
    EXPIRY_TOO_FAR = AuthRefusal.EXPIRY_TOO_FAR.value
    UNREGISTERED_IDENTITY = AuthRefusal.UNREGISTERED_IDENTITY.value
    UNREGISTERED_KEY = AuthRefusal.UNREGISTERED_KEY.value
    BAD_SIGNATURE = AuthRefusal.BAD_SIGNATURE.value
    NOT_A_FRONT_END = AuthRefusal.NOT_A_FRONT_END.value
    OUT_OF_SCOPE = AuthRefusal.OUT_OF_SCOPE.value
    MISSING_ROLE = AuthRefusal.MISSING_ROLE.value


class PendingReview(BaseModel):
    """What is waiting for an answer. ``read_only`` is the recomputed verdict (opaque code counts as False)."""

    model_config = ConfigDict(frozen=True)

    session_id: str = ""
    turn: int
    code_hash: str = Field(min_length=1)
    requester: str
    # Everyone who asked for or edited this code: none of them may be its distinct approver.
    requesters: tuple[str, ...] = ()
    read_only: bool
    choices: tuple[DecisionKind, ...] = ALL_CHOICES
    # The durable grants an auto-run answer leaves ("procedure@code_hash", sorted): the answer must name them.
    grants: tuple[str, ...] = ()
    # What the review showed that the run depends on, beyond the code (review_digest): the answer must name it.
    review: str = ""
    # Code the store proposed for the request (reuse), not code written for it. Nobody asked for that body: an
    # approver who may write the store planted a kill under a harmless question's words, and, not being its
    # requester, approved it alone. State-changing such code runs only after its requester accepted it.
    from_store: bool = False
    # The review key (``review``) its requester accepted: an acceptance holds for the review it answered only.
    accepted: str = ""

    @property
    def askers(self) -> frozenset[str]:
        return frozenset({self.requester, *self.requesters})

    @property
    def awaits_acceptance(self) -> bool:
        """State-changing code from the store that its requester has not accepted for this review yet."""
        return self.from_store and not self.read_only and not (self.accepted and self.accepted == self.review)


class OperatorDecision(BaseModel):
    """One operator's answer. ``code_hash`` may be a prefix of at least 8 characters only when unsigned; a
    signed decision names the full hash, so its signature covers exactly one piece of code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int = Field(ge=0)
    code_hash: str = Field(min_length=1, max_length=HASH_HEX_LENGTH, pattern=r"^[0-9a-fA-F]+$")
    kind: DecisionKind
    approver: Identity
    replacement_code: str | None = Field(default=None, max_length=MAX_REPLACEMENT_CODE_CHARS)
    # An auto-run answer names the durable grants it leaves ("procedure@code_hash", as the review offers them),
    # so its signature vouches for each grant wherever the grant is later read (policy.grants.grant_is_signed):
    # a grant is a row a requester could write, and counts only with its approver's signature over it.
    grants: tuple[str, ...] = Field(default=(), max_length=MAX_GRANTS)
    # The review it answers (review_digest of what was shown): the same code reviewed again in its turn may run
    # other procedure bodies or be judged otherwise, and an answer to the first review must not run the second.
    review: str = Field(default="", pattern=REVIEW_PATTERN)
    auth: Authorization | None = None

    @model_validator(mode="after")
    def _replacement_only_for_edit(self) -> "OperatorDecision":
        if self.kind is DecisionKind.EDIT and not (self.replacement_code or "").strip():
            raise ValueError("an edit decision needs the replacement code")
        if self.kind is not DecisionKind.EDIT and self.replacement_code is not None:
            raise ValueError(f"a {self.kind.value} decision carries no replacement code; use edit to change the code")
        if self.grants and self.kind is not DecisionKind.AUTO_RUN:
            raise ValueError(f"a {self.kind.value} decision leaves no durable grant; only auto_run does")
        return self

    def signed_body(self) -> dict[str, Any]:
        """What the signature covers besides the session, identity, expiry and nonce."""
        body: dict[str, Any] = {
            "turn": self.turn,
            "code_hash": self.code_hash.lower(),
            "decision": self.kind.value,
            "replacement_code_sha256": text_digest(self.replacement_code),
        }
        if self.grants:
            body["grants"] = sorted(self.grants)
        if self.review:
            body["review"] = self.review
        return body


class DecisionVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    accepted: bool
    refusal: DecisionRefusal | None = None
    detail: str = ""
    signed: bool = False
    # The requester's run answer to state-changing code the store proposed: taken as their acceptance of it for
    # their request (``PendingReview.accepted``); it runs nothing, the review still waits for an approver.
    acceptance: bool = False

    @classmethod
    def accept(cls, signed: bool = False, acceptance: bool = False) -> "DecisionVerdict":
        return cls(accepted=True, signed=signed, acceptance=acceptance)

    @classmethod
    def refuse(cls, refusal: DecisionRefusal, detail: str, signed: bool = False) -> "DecisionVerdict":
        return cls(accepted=False, refusal=refusal, detail=detail, signed=signed)


def hash_answers(given: str, pending_hash: str) -> bool:
    """The full hash, or an unambiguous-enough prefix of it (at least 8 characters, any case)."""
    given = given.strip().lower()
    if len(given) < MIN_DECISION_HASH_PREFIX and given != pending_hash.lower():
        return False
    return pending_hash.lower().startswith(given)


def validate_decision(
    pending: PendingReview | None,
    decision: OperatorDecision,
    policy: DeploymentPolicy,
    *,
    now: datetime,
    seen_nonces: Container[str] = (),
    statement: StatementKind = StatementKind.DECISION,
) -> DecisionVerdict:
    """Accept ``decision`` as the answer to ``pending``, or say why not.

    Checks run from "was this signed request already used" through "is this even an answer to what is
    pending" and "is it really from this person" to "may this person give it". Rejecting or editing is open
    to the requester as well as to approvers (withdrawing one's own request, or sending changed code back
    through review, never runs anything); running code needs the approver role for its class, and for
    state-changing code someone other than the requester when the deployment says so. State-changing code the
    store proposed (``PendingReview.from_store``) first needs its requester: their run answer is their acceptance
    (``DecisionVerdict.acceptance``), and before it nobody else's run answer counts. ``statement`` is the kind
    of signed statement that answers ``pending`` (an executor's command approvals are not code decisions).
    """
    if decision.auth is not None and decision.auth.nonce in seen_nonces:
        return DecisionVerdict.refuse(DecisionRefusal.REPLAYED, "This signed decision was already used; sign a new one.")
    if pending is None:
        return DecisionVerdict.refuse(DecisionRefusal.NOTHING_PENDING, "Nothing is waiting for approval in this session.")
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
    if decision.auth is not None and decision.code_hash.lower() != pending.code_hash.lower():
        return DecisionVerdict.refuse(
            DecisionRefusal.PREFIX_IN_SIGNED_DECISION,
            "A signed decision must name the full code hash it approves; sign it again with the full hash.",
        )
    if decision.kind not in pending.choices:
        offered = ", ".join(choice.value for choice in pending.choices)
        return DecisionVerdict.refuse(
            DecisionRefusal.CHOICE_NOT_OFFERED,
            f"{decision.kind.value} is not offered for this code; choose one of: {offered}.",
        )
    if decision.kind is DecisionKind.AUTO_RUN and sorted(decision.grants) != sorted(pending.grants):
        offered = ", ".join(pending.grants) or "none"
        return DecisionVerdict.refuse(
            DecisionRefusal.GRANTS_NOT_OFFERED,
            f"This auto-run answer names other durable grants than the review leaves ({offered}); answer the review "
            "as it is shown now.",
        )
    if decision.kind.runs_code and decision.review != pending.review:  # rejecting or editing runs nothing
        return DecisionVerdict.refuse(
            DecisionRefusal.REVIEW_CHANGED,
            "The review of this code changed since this answer was given (the procedures it runs, its verdict, its "
            "tools or its grants); look at the pending review again and answer that one.",
        )
    auth = authenticate(
        policy, kind=statement, session_id=pending.session_id, identity=decision.approver,
        body=decision.signed_body(), auth=decision.auth, now=now, seen_nonces=seen_nonces,
    )
    if not auth.ok:
        return DecisionVerdict.refuse(DecisionRefusal(auth.refusal.value), auth.detail)  # type: ignore[union-attr]
    approver = decision.approver
    state_changing = not pending.read_only
    if not decision.kind.runs_code:
        if approver in pending.askers or policy.may(approver, Role.REQUEST) or _may_approve(policy, approver, state_changing):
            return DecisionVerdict.accept(auth.signed)
        return DecisionVerdict.refuse(
            DecisionRefusal.APPROVER_NOT_AUTHORISED,
            f"{approver} is not registered to take part in investigations here.", auth.signed,
        )
    asker = approver in pending.askers
    distinct = policy.rules.require_distinct_approver
    if pending.awaits_acceptance and asker and (distinct or not _may_approve(policy, approver, state_changing)):
        # Their acceptance unlocks a kill for someone else's approval: it needs the standing a request needs now,
        # not only to have asked once (a requester whose roles were removed since still accepted).
        if not (policy.may(approver, Role.REQUEST) or _may_approve(policy, approver, state_changing)):
            return DecisionVerdict.refuse(
                DecisionRefusal.APPROVER_NOT_AUTHORISED,
                f"{approver} may no longer ask for code here, so cannot accept the stored procedure proposed for "
                "their request; ask again as someone who may.", auth.signed,
            )
        return DecisionVerdict.accept(auth.signed, acceptance=True)
    if not _may_approve(policy, approver, state_changing):
        role = Role.APPROVE_STATE_CHANGING if state_changing else Role.APPROVE
        who = ", ".join(policy.holders(role)) or "nobody is registered with that role yet"
        what = "state-changing or unanalysable code" if state_changing else "read-only code"
        return DecisionVerdict.refuse(
            DecisionRefusal.APPROVER_NOT_AUTHORISED,
            f"{approver} may not approve {what} (role {role.value} needed); ask one of: {who}.", auth.signed,
        )
    if pending.awaits_acceptance and not asker:
        return DecisionVerdict.refuse(
            DecisionRefusal.REQUESTER_NOT_ACCEPTED,
            "The requester has not accepted this stored procedure yet: it changes PanDA and was proposed from the "
            f"store, not written for this request; ask {pending.requester} to accept it first (their own run "
            "answer accepts it).", auth.signed,
        )
    if state_changing and distinct and (asker or _shares_a_key(policy, approver, pending.askers)):
        return DecisionVerdict.refuse(
            DecisionRefusal.APPROVER_IS_REQUESTER,
            "State-changing code needs approval from someone other than the person who asked for it (one key "
            "registered under two names is one person).", auth.signed,
        )
    return DecisionVerdict.accept(auth.signed)


def _shares_a_key(policy: DeploymentPolicy, approver: str, askers: Iterable[str]) -> bool:
    """Whether ``approver`` is registered with the same key as someone who asked for or edited the code: one
    key under two names is one person (the executors' gate 6 refuses the same for command approvals)."""
    mine = policy.entry(approver)
    if mine is None:
        return False
    return any(other.public_key == mine.public_key for other in map(policy.entry, askers) if other is not None)


def _may_approve(policy: DeploymentPolicy, approver: str, state_changing: bool) -> bool:
    if state_changing:
        return policy.may(approver, Role.APPROVE_STATE_CHANGING)
    return policy.may(approver, Role.APPROVE) or policy.may(approver, Role.APPROVE_STATE_CHANGING)
