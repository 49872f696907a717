"""``/revoke <hash-prefix|proc-name|all>``: which standing permissions an operator's revoke removes.

Pure planning only: the caller removes what the plan lists (session policies from workflow state, durable
grants from the store) and audits it. An ambiguous hash prefix is refused with the hashes it matched, so an
operator never revokes more (or other) than they meant.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from policy.grants import ProcedureGrant, SessionPolicy
from policy.procedures import is_procedure_name

MIN_REVOKE_HASH_PREFIX = 4
_HEX = frozenset("0123456789abcdef")


class RevocationPlan(BaseModel):
    """What to remove, or why nothing is removed (``error`` set, with ``matches`` when ambiguous)."""

    model_config = ConfigDict(frozen=True)

    session_hashes: tuple[str, ...] = ()
    procedures: tuple[str, ...] = ()
    whole: tuple[str, ...] = ()
    every: bool = False
    error: str | None = None
    matches: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


def plan_revocation(
    target: str, session_policies: Mapping[str, SessionPolicy], grants: Mapping[str, ProcedureGrant]
) -> RevocationPlan:
    """Plan ``/revoke target`` over the session's policies (by code hash) and the durable grants (by name).

    - ``all`` removes every session policy and every durable grant, and revokes every answer that could make one
      (``every``): a grant row broken while the revocation was made, and written back later, stays revoked.
    - a ``proc__`` name removes that procedure's grant and revokes every answer naming it whatever code it was
      given on (``whole``), also when no grant is in force and the procedure is not stored (a requester may have
      broken the grant row, or hidden the procedure's row, beforehand); an unambiguous prefix of a granted name
      also works.
    - anything else is a hash prefix (at least 4 hex characters) matched against session policy hashes and
      the code hashes grants were given for; it must identify exactly one hash.
    """
    argument = target.strip()
    if not argument:
        return RevocationPlan(error="Say what to revoke: a code hash prefix, a proc__ name, or all.")
    if argument.lower() == "all":
        return RevocationPlan(session_hashes=tuple(sorted(session_policies)), procedures=tuple(sorted(grants)),
                              every=True)
    if is_procedure_name(argument):
        return _plan_procedure(argument, grants)
    return _plan_hash_prefix(argument.lower(), session_policies, grants)


def _plan_procedure(name: str, grants: Mapping[str, ProcedureGrant]) -> RevocationPlan:
    if name in grants:
        return RevocationPlan(procedures=(name,), whole=(name,))
    candidates = tuple(sorted(granted for granted in grants if granted.startswith(name)))
    if len(candidates) == 1:
        return RevocationPlan(procedures=candidates, whole=candidates)
    if not candidates:
        return RevocationPlan(whole=(name,))
    return RevocationPlan(
        error=f"{name} matches several granted procedures ({', '.join(candidates)}); give the full name.",
        matches=candidates,
    )


def _plan_hash_prefix(
    prefix: str, session_policies: Mapping[str, SessionPolicy], grants: Mapping[str, ProcedureGrant]
) -> RevocationPlan:
    if len(prefix) < MIN_REVOKE_HASH_PREFIX or not set(prefix) <= _HEX:
        return RevocationPlan(
            error=f"{prefix!r} is not a code hash prefix: give at least {MIN_REVOKE_HASH_PREFIX} hex characters, "
            "a proc__ name, or all."
        )
    known = {hash_.lower() for hash_ in session_policies} | {grant.code_hash.lower() for grant in grants.values()}
    matched = tuple(sorted(hash_ for hash_ in known if hash_.startswith(prefix)))
    if not matched:
        return RevocationPlan(
            error=f"No session policy or grant has a code hash starting {prefix}; /approvals lists them."
        )
    if len(matched) > 1:
        return RevocationPlan(
            error=f"Hash prefix {prefix} is ambiguous; it matches {', '.join(matched)}. Give more characters.",
            matches=matched,
        )
    (full,) = matched
    return RevocationPlan(
        session_hashes=tuple(sorted(hash_ for hash_ in session_policies if hash_.lower() == full)),
        procedures=tuple(sorted(name for name, grant in grants.items() if grant.code_hash.lower() == full)),
    )
