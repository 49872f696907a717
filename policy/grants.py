"""Standing permissions an operator can leave behind: session code policies and durable procedure grants.

Both are bound to content, not names. A session policy is keyed by the code's hash and also remembers the
hashes of the procedures that code reached when it was approved; a durable grant remembers the hash of the
procedure's code it was given for. If any of that code changes, the permission stops applying and the next
turn is reviewed again. (Upstream's durable auto-run checked only the referenced names, so a procedure
whose code changed kept running unreviewed.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from policy.approvers import DeploymentPolicy, Role, authenticate
from policy.code_identity import code_hash
from policy.decisions import DecisionKind, OperatorDecision
from policy.procedures import reached_procedures
from policy.signing import MAX_CLOCK_SKEW_S, StatementKind
from policy.signature import DEFAULT_CONVENTIONS, ScanConventions


class CodePolicy(str, Enum):
    AUTO_RUN = "auto_run"
    ALWAYS_ASK = "always_ask"


class SessionPolicy(BaseModel):
    """A per-session policy for one code hash, with the procedure code it was approved against."""

    model_config = ConfigDict(frozen=True)

    policy: CodePolicy
    procedure_hashes: Mapping[str, str] = Field(default_factory=dict)
    approved_by: str = ""


class ProcedureGrant(BaseModel):
    """A durable, cross-session auto-run grant for one procedure, valid only for the code it was granted on, and
    only with ``decision``: the approver's signed auto-run answer in ``session_id`` that names it
    (``grant_is_signed``). It is stored as a row, which a requester with the store's role can write too."""

    model_config = ConfigDict(frozen=True)

    procedure: str = Field(min_length=1)
    code_hash: str = Field(min_length=1)
    granted_by: str = Field(min_length=1)
    granted_at: datetime
    session_id: str = ""
    decision: OperatorDecision | None = None

    @property
    def term(self) -> str:
        return grant_term(self.procedure, self.code_hash)


def grant_term(procedure: str, code_hash_: str) -> str:
    """How an auto-run answer names a grant it leaves: "procedure@code_hash"."""
    return f"{procedure}@{code_hash_}"


# How a revocation names more than one term: every code of one procedure, or every grant there is.
EVERY_GRANT = "*"


def procedure_terms(procedure: str) -> str:
    """The term of a revocation of ``procedure`` whatever code its grants were given on."""
    return f"{procedure}@*"


def covering_terms(term: str) -> tuple[str, str, str]:
    """The revocation terms that cover a grant's ``term``: its own, its procedure's, every grant's."""
    return term, procedure_terms(term.rsplit("@", 1)[0]), EVERY_GRANT


def grant_terms(procedures: Iterable[str], procedure_code: Mapping[str, str]) -> tuple[str, ...]:
    """The grants auto-run leaves for ``procedures`` bound to their current code, sorted."""
    return tuple(sorted(grant_term(name, code_hash(procedure_code[name])) for name in set(procedures)))


def grant_is_signed(grant: ProcedureGrant, policy: DeploymentPolicy, now: datetime) -> bool:
    """Whether ``grant`` counts under ``policy`` at ``now``: an approver who may approve read-only code now signed,
    in the grant's session, an auto-run answer naming exactly this procedure and code hash (its signature's expiry
    bounded when it could be used as an answer, not how long the grant stands; a revoked approver's grants
    lapse), dated no later than now (a revocation covers what was signed before it: an answer dated ahead would
    outlive one made meanwhile). A deployment that does not require signatures takes its grants unsigned, as its
    decisions."""
    decision = grant.decision
    if decision is None or decision.auth is None:
        return not policy.rules.require_signatures
    if decision.kind is not DecisionKind.AUTO_RUN or grant.term not in decision.grants \
            or decision.approver != grant.granted_by or not grant.session_id:
        return False
    while_valid = decision.auth.expires_at - timedelta(seconds=1)
    verdict = authenticate(policy, kind=StatementKind.DECISION, session_id=grant.session_id,
                           identity=decision.approver, body=decision.signed_body(), auth=decision.auth,
                           now=while_valid)
    return verdict.ok and decision.auth.issued_at <= now + timedelta(seconds=MAX_CLOCK_SKEW_S) and (
        policy.may(decision.approver, Role.APPROVE) or policy.may(decision.approver, Role.APPROVE_STATE_CHANGING))


class GrantRevocation(BaseModel):
    """A revoked grant as the store keeps it (insert-only): the term, the nonce of the signed answer the row held,
    and ``through``: answers of the term signed before it are revoked too (``grant_is_revoked``)."""

    model_config = ConfigDict(frozen=True)

    nonce: str
    term: str
    through: datetime | None = None


def revocation_of(grant: ProcedureGrant, now: datetime) -> GrantRevocation | None:
    """How revoking ``grant`` at ``now`` is recorded (None for an unsigned grant: its row is all there is).

    The answer behind a grant stays valid after the revocation, and so do the approver's other auto-run answers
    naming the same procedure and code, from other sessions, ones the workflow refused, or ones signed for longer
    than the deployment takes: a requester who wrote one of them into the row would have revived the grant. Every
    answer says when it was signed, so every answer of the term signed before the revocation is revoked with it,
    up to a signer's clock running ``MAX_CLOCK_SKEW_S`` ahead (``grant_again_after``)."""
    auth = grant.decision.auth if grant.decision is not None else None
    if auth is None:
        return None
    return GrantRevocation(nonce=auth.nonce, term=grant.term, through=grant_again_after(now))


def revocation_of_procedures(procedures: Iterable[str], every: bool, now: datetime) -> list[GrantRevocation]:
    """How revoking the named procedures (or every grant) at ``now`` is recorded, whatever their grant rows hold: a
    requester who broke a row beforehand (so that no grant was in force to revoke) wrote it back afterwards, and its
    answer counted again. They name no answer (``nonce`` empty): they cover by time alone."""
    terms = [EVERY_GRANT] if every else [procedure_terms(name) for name in sorted(set(procedures))]
    return [GrantRevocation(nonce="", term=term, through=grant_again_after(now)) for term in terms]


def grant_again_after(now: datetime) -> datetime:
    """When an auto-run answer leaves a durable grant of a term revoked at ``now`` again: once it is signed later
    than any clock that signed before the revocation could say."""
    return now + timedelta(seconds=MAX_CLOCK_SKEW_S)


def grant_is_revoked(grant: ProcedureGrant, revocations: Iterable[GrantRevocation]) -> bool:
    """Whether a recorded revocation of the grant's term covers its signed answer (``revocation_of``)."""
    auth = grant.decision.auth if grant.decision is not None else None
    if auth is None:
        return False
    covering = covering_terms(grant.term)
    return any(r.term in covering and (r.nonce == auth.nonce or (r.through is not None and auth.issued_at < r.through))
               for r in revocations)


def current_procedure_hashes(names: tuple[str, ...], procedure_code: Mapping[str, str]) -> dict[str, str]:
    """Hashes of the current stored code of the named procedures (procedures without stored code are left out)."""
    return {name: code_hash(procedure_code[name]) for name in names if name in procedure_code}


def make_session_policy(
    code: str,
    policy: CodePolicy,
    procedure_code: Mapping[str, str],
    approved_by: str,
    conventions: ScanConventions = DEFAULT_CONVENTIONS,
) -> tuple[str, SessionPolicy]:
    """The ``(code_hash, policy)`` entry to store when an operator picks auto-run or always-ask."""
    reached = reached_procedures(code, procedure_code, conventions)
    return code_hash(code), SessionPolicy(
        policy=policy,
        procedure_hashes=current_procedure_hashes(reached, procedure_code),
        approved_by=approved_by,
    )


def make_grant(
    procedure: str, procedure_code: Mapping[str, str], granted_by: str, granted_at: datetime
) -> ProcedureGrant:
    """A durable grant bound to the procedure's current code, unsigned (what a deployment without signatures
    keeps; a signed one comes from ``signed_grants``). The caller supplies the time (no clocks here)."""
    if procedure not in procedure_code:
        raise ValueError(f"cannot grant auto-run to {procedure!r}: no stored code for that procedure")
    return ProcedureGrant(
        procedure=procedure,
        code_hash=code_hash(procedure_code[procedure]),
        granted_by=granted_by,
        granted_at=granted_at,
    )


def signed_grants(answer: OperatorDecision, session_id: str, granted_at: datetime) -> list[ProcedureGrant]:
    """The grants an accepted auto-run ``answer`` names, each carrying the answer (its signature vouches for it)."""
    out = []
    for term in answer.grants:
        procedure, _, hash_ = term.rpartition("@")
        out.append(ProcedureGrant(procedure=procedure, code_hash=hash_, granted_by=answer.approver,
                                  granted_at=granted_at, session_id=session_id, decision=answer))
    return out


def session_approver_stands(entry: SessionPolicy, policy: DeploymentPolicy) -> bool:
    """Whether the person who chose ``entry`` may still approve the read-only code it covers under ``policy`` (the
    deployment's registry now). A durable grant lapses with its approver (``grant_is_signed``); a session auto-run
    kept running code its approver, key revoked or role removed, could no longer approve."""
    who = entry.approved_by
    return bool(who) and (policy.may(who, Role.APPROVE) or policy.may(who, Role.APPROVE_STATE_CHANGING))


def session_policy_still_valid(
    entry: SessionPolicy, procedure_code: Mapping[str, str], reached: tuple[str, ...]
) -> bool:
    """True when every procedure the code reaches now is one it reached at approval, with unchanged code."""
    now = current_procedure_hashes(reached, procedure_code)
    return set(reached) == set(entry.procedure_hashes) and now == dict(entry.procedure_hashes)


def grant_matches(grant: ProcedureGrant | None, procedure: str, procedure_code: Mapping[str, str]) -> bool:
    """True when ``grant`` exists and was given for the procedure's current code."""
    return (
        grant is not None
        and grant.procedure == procedure
        and procedure in procedure_code
        and grant.code_hash == code_hash(procedure_code[procedure])
    )
