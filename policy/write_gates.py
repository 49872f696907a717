"""The seven production write gates, judged in order, each refusal naming its gate.

A production write runs only when all of these hold:

1. ``write_rule``: an explicit write rule of the command policy matches the command's shape;
2. ``write_credential``: the rule names a credential family this executor holds, and its values are set;
3. ``capability_grant``: a typed grant, signed by an administrator the executor pins, covers this
   environment, tool, rule and the exact target set;
4. ``grant_capacity``: such a grant is unexpired and has execution and repetition capacity left;
5. ``dry_run``: where the rule supports one, the server-side dry run succeeded;
6. ``approval``: a signed decision by an identity registered to approve state-changing work, distinct from
   the requester, approves exactly this command;
7. ``executor_signature``: the decision envelope's signature and its environment and channel were verified
   by this executor, and the executor serves the write channel.

Gates 1-4, 6 and 7 are pure and judged here, in that order; gate 5 runs a command, so the executor runs it
only after every pure gate has passed, and a failing dry run refuses with gate 5. A state-changing command
never runs in an automatic phase (``phase_refusal``), in any environment.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from datetime import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict

from policy.approvers import DeploymentPolicy
from policy.capabilities import CapabilityGrant, capacity_refusal, covers
from policy.decisions import STATE_CHANGING_CHOICES, DecisionRefusal, PendingReview, validate_decision
from policy.envelopes import EnvelopeClaims, EnvelopeVerdict, command_review_hash
from policy.signing import StatementKind


class Gate(str, Enum):
    WRITE_RULE = "write_rule"
    WRITE_CREDENTIAL = "write_credential"
    CAPABILITY_GRANT = "capability_grant"
    GRANT_CAPACITY = "grant_capacity"
    DRY_RUN = "dry_run"
    APPROVAL = "approval"
    EXECUTOR_SIGNATURE = "executor_signature"

    @property
    def number(self) -> int:
        return list(Gate).index(self) + 1

    @property
    def label(self) -> str:
        return f"gate {self.number} ({self.value})"


class GateRefusal(BaseModel):
    model_config = ConfigDict(frozen=True)

    gate: Gate
    detail: str

    @property
    def message(self) -> str:
        return f"production write refused at {self.gate.label}: {self.detail}"


class WriteFacts(BaseModel):
    """What the executor established before judging: each field is one gate's evidence."""

    model_config = ConfigDict(frozen=True)

    environment: str
    tool: str
    # gate 1: the rule that matched (None: no rule allowed the command) and its access
    rule: str | None
    access: str | None
    denial: str = ""
    # gate 2
    credential: str | None
    held_credential: str | None
    credential_values_present: bool
    # gates 3 and 4
    targets: tuple[str, ...]
    argv_digest: str
    grants: tuple[CapabilityGrant, ...] = ()  # only those a pinned administrator signed
    repetitions: Mapping[str, int] = {}
    ignored_grants: tuple[str, ...] = ()  # stored rows that count for nothing, and why
    # gate 6
    approval_refusal: str | None = None
    # gate 7
    envelope: EnvelopeVerdict
    envelope_channel: str
    executor_channel: str


class PureGatesPassed(BaseModel):
    model_config = ConfigDict(frozen=True)

    grant: CapabilityGrant


def judge_pure_gates(facts: WriteFacts, *, now: datetime) -> GateRefusal | PureGatesPassed:
    """The first failing pure gate, in order, or the grant the write will consume."""
    if facts.rule is None or facts.access != "write":
        why = facts.denial or (f"rule {facts.rule!r} allows only reads" if facts.rule else "no rule matched")
        return GateRefusal(gate=Gate.WRITE_RULE, detail=f"no explicit write rule for this {facts.tool} command ({why})")
    if facts.credential is None:
        return GateRefusal(gate=Gate.WRITE_CREDENTIAL, detail=f"rule {facts.rule!r} names no write credential")
    if facts.credential != facts.held_credential:
        held = facts.held_credential or "none"
        return GateRefusal(gate=Gate.WRITE_CREDENTIAL,
                           detail=f"rule {facts.rule!r} needs credential {facts.credential!r}; this executor holds {held}")
    if not facts.credential_values_present:
        return GateRefusal(gate=Gate.WRITE_CREDENTIAL,
                           detail=f"credential {facts.credential!r} has no value in this executor's environment; "
                                  "set its variables where the executor runs")
    covering = [g for g in facts.grants if covers(g, environment=facts.environment, tool=facts.tool, rule=facts.rule,
                                                   targets=facts.targets)]
    if not covering:
        ignored = ""
        if facts.ignored_grants:
            ignored = (f" ({len(facts.ignored_grants)} stored grant row(s) for it count for nothing; first: "
                       f"{facts.ignored_grants[0]})")
        return GateRefusal(gate=Gate.CAPABILITY_GRANT,
                           detail=f"no capability grant signed by an administrator for {facts.tool}/{facts.rule} on "
                                  f"exactly {list(facts.targets)}{ignored}; ask an administrator for one "
                                  "(`bamboo exec grant --admin`)")
    reasons = []
    usable = None
    for grant in covering:
        reason = capacity_refusal(grant, now=now, repetitions_of_argv=facts.repetitions.get(grant.grant_id, 0))
        if reason is None:
            usable = grant
            break
        reasons.append(reason)
    if usable is None:
        return GateRefusal(gate=Gate.GRANT_CAPACITY, detail="; ".join(reasons))
    if facts.approval_refusal is not None:
        return GateRefusal(gate=Gate.APPROVAL, detail=facts.approval_refusal)
    if not facts.envelope.ok:
        return GateRefusal(gate=Gate.EXECUTOR_SIGNATURE, detail=facts.envelope.detail)
    if facts.executor_channel != "rw" or facts.envelope_channel != facts.executor_channel:
        return GateRefusal(gate=Gate.EXECUTOR_SIGNATURE,
                           detail=f"a write runs only on an rw executor with an rw envelope (executor "
                                  f"{facts.executor_channel}, envelope {facts.envelope_channel})")
    return PureGatesPassed(grant=usable)


def approval_refusal(
    claims: EnvelopeClaims, policy: DeploymentPolicy, *, now: datetime, seen_nonces: Container[str] = (),
) -> str | None:
    """Gate 6: why the envelope's operator decision does not approve this command, or None.

    The decision must be signed (whatever the deployment's signature rule says: a production write is never
    approved by an unsigned answer), name the session (the run), the command's review hash, a choice that
    runs it, and come from an identity holding the state-changing approver role other than the requester.
    """
    decision = claims.approval
    if decision is None:
        return "the envelope carries no operator approval; have an approver sign one (`bamboo exec approve`)"
    if decision.auth is None:
        return "the operator approval is unsigned; a production write needs a signed approval"
    if not decision.kind.runs_code:
        return f"the operator's decision is {decision.kind.value}, which does not approve running the command"
    if decision.auth.key_id == claims.key_id:
        return ("the approval is signed with the key that signed the request; someone else approves it with their "
                "own key (one key under two names in the executor's keys file and the registry is one person)")
    strict = policy.model_copy(update={"rules": policy.rules.model_copy(
        update={"require_signatures": True, "require_distinct_approver": True})})
    pending = PendingReview(session_id=claims.run_id, turn=decision.turn, code_hash=command_review_hash(claims),
                            requester=claims.requester, read_only=False, choices=STATE_CHANGING_CHOICES)
    verdict = validate_decision(pending, decision, strict, now=now, seen_nonces=seen_nonces,
                                statement=StatementKind.COMMAND_APPROVAL)
    if verdict.accepted:
        return None
    refusal = verdict.refusal.value if isinstance(verdict.refusal, DecisionRefusal) else "refused"
    return f"{refusal}: {verdict.detail}"


def phase_refusal(claims: EnvelopeClaims, access: str) -> str | None:
    """A state-changing command never runs in an automatic phase: nobody is watching it."""
    if access == "write" and claims.phase == "automatic":
        return ("a state-changing command never runs in an automatic phase; ask for it in an interactive turn "
                "and have it approved")
    return None


def gated(environment: str, gated_environments: Sequence[str]) -> bool:
    """Whether writes in ``environment`` pass the seven gates (production, by default)."""
    return environment in gated_environments
