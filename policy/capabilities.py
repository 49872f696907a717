"""Capability grants: the typed, bounded permission a production write is executed under.

A grant names one environment, one tool, one write rule (the command shape) and an *exact* target set;
it expires, and it carries two capacities: how many executions it allows in total and how many times the
same normalised argv may be repeated under it. A command whose targets are a subset, a superset or merely
overlap the grant's set is not covered: widening what a command touches needs a new grant.

A grant is a statement signed by an administrator the deployment pins (``policy.trust_root``, kind
``grant_capability``, subject the grant id), whose body (``GrantTerms``) carries every field gates 3 and 4
judge. The database row only carries it: anyone with the app role can insert a row, so a grant counts only
when its signature verifies against the pinned keys the executor read itself, and it is judged from the
signed body alone. A revocation is a ``revoke_capability`` statement signed the same way.

These are the pure judgements; the store (``bamboo.store.executor_state``) counts executions from the grant's
recorded uses and spends one atomically under a lock on the grant, re-judging with these functions, so two
executors racing for the last execution cannot both win.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policy.identity import Identity
from policy.signing import utc_expiry
from policy.trust_root import SignedStatement, StatementKind, TrustRoot, verify

GRANT_ID_PATTERN = r"^[0-9a-f]{16,64}$"


class GrantTerms(BaseModel):
    """The body an administrator signs: everything gates 3 and 4 judge, and who granted it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: str = Field(min_length=1, max_length=100)
    tool: str = Field(min_length=1, max_length=100)
    rule: str = Field(min_length=1, max_length=100)
    targets: tuple[str, ...] = Field(min_length=1, max_length=256)
    max_executions: int = Field(ge=1)
    max_repetitions: int = Field(ge=1)
    expires_at: datetime
    granted_by: Identity

    @field_validator("targets")
    @classmethod
    def _sorted_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(value)))

    @field_validator("expires_at")
    @classmethod
    def _aware_whole_seconds(cls, value: datetime) -> datetime:
        return utc_expiry(value).replace(microsecond=0)

    @model_validator(mode="after")
    def _repetitions_within_executions(self) -> "GrantTerms":
        if self.max_repetitions > self.max_executions:
            raise ValueError("a grant cannot allow more repetitions of one command than executions in total")
        return self


class CapabilityGrant(GrantTerms):
    """A grant as gates 3 and 4 judge it: the signed terms, its id, and what the store counted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grant_id: str = Field(min_length=1, max_length=64)
    executions_used: int = Field(default=0, ge=0)
    revoked: bool = False


def grant_of(grant_id: str, terms: GrantTerms, *, executions_used: int, revoked: bool) -> CapabilityGrant:
    """The grant as gates 3 and 4 judge it: the signed terms, and what the store counted."""
    return CapabilityGrant(grant_id=grant_id, **dict(terms), executions_used=executions_used, revoked=revoked)


def signed_terms(signed: SignedStatement, root: TrustRoot) -> GrantTerms | str:
    """The terms of a grant a pinned administrator signed, or why the statement grants nothing."""
    st = signed.statement
    if st.kind is not StatementKind.GRANT_CAPABILITY:
        return f"a {st.kind.value} statement is not a capability grant"
    if not re.match(GRANT_ID_PATTERN, st.subject):
        return "the statement's subject is not a grant id"
    reason = verify(signed, root)
    if reason is not None:
        return reason
    try:
        terms = GrantTerms.model_validate(st.body)
    except ValidationError as exc:
        return f"the signed body is not a grant ({exc.errors()[0].get('msg', 'invalid')})"
    if terms.granted_by != st.signer:
        return f"the grant names {terms.granted_by} as its granter but {st.signer} signed it"
    return terms


def revokes(signed: SignedStatement, root: TrustRoot, grant_id: str) -> bool:
    """Whether ``signed`` is a pinned administrator's revocation of ``grant_id``."""
    st = signed.statement
    return st.kind is StatementKind.REVOKE_CAPABILITY and st.subject == grant_id and verify(signed, root) is None


def covers(grant: CapabilityGrant, *, environment: str, tool: str, rule: str, targets: list[str] | tuple[str, ...]) -> bool:
    """Gate 3: the grant is for this environment, tool and rule, and for exactly this target set."""
    return (not grant.revoked and grant.environment == environment and grant.tool == tool and grant.rule == rule
            and grant.targets == tuple(sorted(set(targets))))


def capacity_refusal(grant: CapabilityGrant, *, now: datetime, repetitions_of_argv: int) -> str | None:
    """Gate 4: why ``grant`` cannot carry one more execution of an argv already run ``repetitions_of_argv``
    times under it, or None when it can."""
    if grant.expires_at <= now:
        return f"grant {grant.grant_id} expired at {grant.expires_at.isoformat()}; ask for a new grant"
    if grant.executions_used >= grant.max_executions:
        return (f"grant {grant.grant_id} has no executions left ({grant.executions_used} of "
                f"{grant.max_executions} used); ask for a new grant")
    if repetitions_of_argv >= grant.max_repetitions:
        return (f"grant {grant.grant_id} allows this exact command {grant.max_repetitions} time(s) and it already "
                f"ran {repetitions_of_argv}; ask for a new grant to repeat it")
    return None
