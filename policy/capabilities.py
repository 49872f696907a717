"""Capability grants: the typed, bounded permission a production write is executed under.

A grant names one environment, one tool, one write rule (the command shape) and an *exact* target set;
it expires, and it carries two capacities: how many executions it allows in total and how many times the
same normalised argv may be repeated under it. A command whose targets are a subset, a superset or merely
overlap the grant's set is not covered: widening what a command touches needs a new grant.

These are the pure judgements; the store (``bamboo.store.executor_state``) keeps the counters and consumes
capacity atomically under a row lock, re-judging with these functions, so two executors racing for the last
execution cannot both win.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policy.identity import Identity
from policy.signing import utc_expiry


class CapabilityGrant(BaseModel):
    model_config = ConfigDict(frozen=True)

    grant_id: str = Field(min_length=1, max_length=64)
    environment: str
    tool: str
    rule: str
    targets: tuple[str, ...] = Field(min_length=1)
    max_executions: int = Field(ge=1)
    max_repetitions: int = Field(ge=1)
    executions_used: int = Field(default=0, ge=0)
    expires_at: datetime
    granted_by: Identity
    revoked: bool = False

    @field_validator("targets")
    @classmethod
    def _sorted_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(value)))

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return utc_expiry(value)

    @model_validator(mode="after")
    def _repetitions_within_executions(self) -> "CapabilityGrant":
        if self.max_repetitions > self.max_executions:
            raise ValueError("a grant cannot allow more repetitions of one command than executions in total")
        return self


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
