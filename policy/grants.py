"""Standing permissions an operator can leave behind: session code policies and durable procedure grants.

Both are bound to content, not names. A session policy is keyed by the code's hash and also remembers the
hashes of the procedures that code reached when it was approved; a durable grant remembers the hash of the
procedure's code it was given for. If any of that code changes, the permission stops applying and the next
turn is reviewed again. (Upstream's durable auto-run checked only the referenced names, so a procedure
whose code changed kept running unreviewed.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from policy.code_identity import code_hash
from policy.procedures import reached_procedures
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
    """A durable, cross-session auto-run grant for one procedure, valid only for the code it was granted on."""

    model_config = ConfigDict(frozen=True)

    procedure: str = Field(min_length=1)
    code_hash: str = Field(min_length=1)
    granted_by: str = Field(min_length=1)
    granted_at: datetime


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
    """A durable grant bound to the procedure's current code. The caller supplies the time (no clocks here)."""
    if procedure not in procedure_code:
        raise ValueError(f"cannot grant auto-run to {procedure!r}: no stored code for that procedure")
    return ProcedureGrant(
        procedure=procedure,
        code_hash=code_hash(procedure_code[procedure]),
        granted_by=granted_by,
        granted_at=granted_at,
    )


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
