"""Who may ask for code and who may answer a review: the deployment's rules and its registry of keys.

Both belong to the deployment, never to the person who starts a session. The worker builds a
``DeploymentPolicy`` from its own settings and the approver registry in its database and hands it to the
workflow with every policy context; a client's settings cannot weaken it, because no client sends it. Each
policy has a ``version`` (a hash of its whole content) that every decision records.

``authenticate`` checks a signed statement (``policy.signing``) against the registry: replayed nonce,
expiry, unknown identity or key, forged signature, and a front end speaking for someone outside its scope.
The registry itself is what the pinned administrators signed (``policy.trust_root``), never a table's rows. Which
*role* an action needs is the caller's decision (``policy.decisions`` for reviews).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Mapping
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policy.identity import Identity
from policy.signing import (
    DEFAULT_DEPLOYMENT,
    DEPLOYMENT_PATTERN,
    MAX_CLOCK_SKEW_S,
    Authorization,
    IdentityKey,
    StatementKind,
    signature_valid,
    statement_bytes,
)

DEFAULT_MAX_SIGNATURE_TTL_S = 24 * 3600


class Role(str, Enum):
    REQUEST = "request"  # send messages that make the model write code; withdraw (reject) or edit one's own
    APPROVE = "approve"  # approve read-only code
    APPROVE_STATE_CHANGING = "approve_state_changing"  # approve state-changing or unanalysable code
    FRONT_END = "front_end"  # a console or bot that signs for the registered person it authenticated


class RegisteredKey(IdentityKey):
    """One registry entry: a canonical identity, its Ed25519 public key and its roles."""

    roles: frozenset[Role] = frozenset()
    # A front end's scope: the identities it may sign for (from its registration and the account bindings an
    # administrator signed); a person's: the front ends that may sign for them. Never "everyone".
    speaks_for: frozenset[Identity] = frozenset()
    front_ends: frozenset[Identity] = frozenset()


class ApprovalRules(BaseModel):
    """The deployment's rules. ``allow_mutating_autorun`` only exposes state-changing procedures to the
    interactive planner; nothing state-changing ever runs without a fresh answer."""

    model_config = ConfigDict(frozen=True)

    require_signatures: bool = True
    require_distinct_approver: bool = True
    allow_mutating_autorun: bool = False
    max_signature_ttl_s: int = Field(default=DEFAULT_MAX_SIGNATURE_TTL_S, ge=60, le=7 * 24 * 3600)


class AuthRefusal(str, Enum):
    UNSIGNED = "unsigned"
    REPLAYED = "replayed"
    EXPIRED = "expired"
    EXPIRY_TOO_FAR = "expiry_too_far"
    SIGNED_LATER = "signed_later"
    UNREGISTERED_IDENTITY = "unregistered_identity"
    UNREGISTERED_KEY = "unregistered_key"
    BAD_SIGNATURE = "bad_signature"
    NOT_A_FRONT_END = "not_a_front_end"
    OUT_OF_SCOPE = "out_of_scope"
    MISSING_ROLE = "missing_role"


class AuthVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    refusal: AuthRefusal | None = None
    detail: str = ""
    signed: bool = False

    @classmethod
    def refuse(cls, refusal: AuthRefusal, detail: str) -> "AuthVerdict":
        return cls(ok=False, refusal=refusal, detail=detail)


class DeploymentPolicy(BaseModel):
    """Rules plus the registry, as the worker read them; the workflow judges every request against this."""

    model_config = ConfigDict(frozen=True)

    rules: ApprovalRules = Field(default_factory=ApprovalRules)
    approvers: tuple[RegisteredKey, ...] = ()
    # The deployment's own name (its pinned trust root's): every signed request must name it.
    deployment: str = Field(default=DEFAULT_DEPLOYMENT, pattern=DEPLOYMENT_PATTERN)

    @property
    def version(self) -> str:
        """SHA-256 (first 16 hex digits) of the canonical content: changes whenever a rule or a key does."""
        content = {
            "deployment": self.deployment,
            "rules": self.rules.model_dump(mode="json"),
            "approvers": sorted(
                ({"identity": a.identity, "public_key": a.public_key, "roles": sorted(r.value for r in a.roles),
                  "speaks_for": sorted(a.speaks_for), "front_ends": sorted(a.front_ends)}
                 for a in self.approvers),
                key=lambda entry: str(entry["identity"]),
            ),
        }
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def entry(self, identity: str) -> RegisteredKey | None:
        return next((a for a in self.approvers if a.identity == identity), None)

    def may(self, identity: str, role: Role) -> bool:
        """Whether ``identity`` holds ``role``. With signatures off and an empty registry, anyone may act
        (a deployment that explicitly opted out of authentication); otherwise the registry decides."""
        if not self.approvers and not self.rules.require_signatures:
            return True
        entry = self.entry(identity)
        return entry is not None and role in entry.roles

    def may_speak_for(self, front_end: str, identity: str) -> bool:
        """Whether the registered front end ``front_end`` may sign for ``identity``: it holds the front-end role
        and either its scope names the person or the person's entry names it."""
        signer, person = self.entry(front_end), self.entry(identity)
        if signer is None or person is None or Role.FRONT_END not in signer.roles:
            return False
        return identity in signer.speaks_for or front_end in person.front_ends

    def holders(self, role: Role) -> list[str]:
        return sorted(a.identity for a in self.approvers if role in a.roles)


def authenticate(
    policy: DeploymentPolicy,
    *,
    kind: StatementKind,
    session_id: str,
    identity: str,
    body: Mapping[str, Any],
    auth: Authorization | None,
    now: datetime,
    seen_nonces: Container[str] = (),
) -> AuthVerdict:
    """Check ``auth`` for a statement of ``kind`` by ``identity`` with ``body``; the reason when it fails.

    An absent signature passes only when the deployment does not require signatures. A present one is
    always checked, whatever the rules say: a forged signature is never ignored.
    """
    if auth is None:
        if policy.rules.require_signatures:
            return AuthVerdict.refuse(
                AuthRefusal.UNSIGNED,
                "This deployment requires signed requests; send it with the bamboo CLI (which signs with your "
                "registered key) or add the output of `bamboo sign` to the input.",
            )
        return AuthVerdict(ok=True)
    if auth.nonce in seen_nonces:
        return AuthVerdict.refuse(AuthRefusal.REPLAYED, "This signed request was already used; sign a new one.")
    if auth.expires_at <= now:
        return AuthVerdict.refuse(
            AuthRefusal.EXPIRED, f"The signature expired at {auth.expires_at.isoformat()}; sign the request again."
        )
    longest = timedelta(seconds=policy.rules.max_signature_ttl_s)
    if auth.expires_at > now + longest or auth.expires_at - auth.issued_at > longest:
        return AuthVerdict.refuse(
            AuthRefusal.EXPIRY_TOO_FAR,
            f"The signature is valid for more than {policy.rules.max_signature_ttl_s} s; sign with a shorter expiry.",
        )
    if auth.issued_at > now + timedelta(seconds=MAX_CLOCK_SKEW_S):
        return AuthVerdict.refuse(
            AuthRefusal.SIGNED_LATER,
            f"The signature says it was made at {auth.issued_at.isoformat()}, later than this deployment's time "
            f"({now.isoformat()}); set the signing machine's clock right and sign again.",
        )
    signer = policy.entry(auth.signer)
    if signer is None:
        return AuthVerdict.refuse(
            AuthRefusal.UNREGISTERED_IDENTITY,
            f"No key is registered for {auth.signer}; ask the deployment to register one (`bamboo keys register`).",
        )
    if signer.key_id != auth.key_id:
        return AuthVerdict.refuse(
            AuthRefusal.UNREGISTERED_KEY,
            f"The key {auth.key_id} that signed this is not the key registered for {auth.signer} "
            f"({signer.key_id}); sign with the registered key or register the new one.",
        )
    message = statement_bytes(kind, session_id, identity, dict(body), auth.signer, auth.key_id, auth.issued_at,
                              auth.expires_at, auth.nonce, deployment=policy.deployment)
    if not signature_valid(signer.public_key, message, auth.signature):
        return AuthVerdict.refuse(
            AuthRefusal.BAD_SIGNATURE,
            f"The signature does not match {auth.signer}'s registered key for this exact request in the deployment "
            f"{policy.deployment!r}; it was altered, or signed for something else or another deployment (the "
            "signer's BAMBOO_DEPLOYMENT must name this one).",
        )
    if auth.signer != identity:
        if Role.FRONT_END not in signer.roles:
            return AuthVerdict.refuse(
                AuthRefusal.NOT_A_FRONT_END,
                f"{auth.signer} signed for {identity}, but only a registered front end may speak for someone else.",
            )
        if policy.entry(identity) is None:
            return AuthVerdict.refuse(
                AuthRefusal.UNREGISTERED_IDENTITY, f"{identity} is not registered with this deployment."
            )
        if not policy.may_speak_for(auth.signer, identity):
            return AuthVerdict.refuse(
                AuthRefusal.OUT_OF_SCOPE,
                f"{auth.signer} is a front end but may not speak for {identity}; an administrator binds the "
                f"account (`bamboo console add-user`) or lists the front end (`bamboo keys register {identity} "
                f"--front-end {auth.signer}`).",
            )
    return AuthVerdict(ok=True, signed=True)
