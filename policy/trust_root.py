"""The root of trust: administrators' keys the deployment pins, and the statements only they can sign.

Who may ask for code, who may approve it, which front end may speak for whom, which console account is which
person, and which capability grants exist are *statements*: each is signed by an administrator whose public
key the deployment pinned where its processes read their settings (``BAMBOO_ADMIN_KEYS_FILE``, a file the
database's app role cannot write). Rows in the database only carry statements; a row whose statement is not
signed by a pinned key counts for nothing, whoever wrote it. Nothing is ever updated in place: a new key, a
revocation or a new binding is a new statement, and the latest one (by its signed issue time) about a subject
decides, so a copy of an old statement written again changes nothing.

Everything here is pure: parsing the pinned keys, the exact bytes signed (``statement_bytes``), checking a
statement (``verify``) and folding checked statements into the registry (``fold_registry``). Signing happens
in clients (``bamboo.approvals``), storage in ``bamboo.approvals.registry``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policy.approvers import RegisteredKey, Role
from policy.identity import Identity, IdentityError, canonical_identity
from policy.signing import (
    DEFAULT_DEPLOYMENT,
    DEPLOYMENT_PATTERN,
    NONCE_PATTERN,
    IdentityKey,
    decode_public_key,
    signature_valid,
    utc_expiry,
)

DOMAIN = b"bamboo-trust-statement-v1\n"
# Identities the embedded demo provisions start with this; a deployment of its own refuses to pin them.
DEMO_PREFIX = "demo-"
MAX_PINNED_ADMINS = 64
# The admin keys file's word for a key rotated out: ``retired IDENTITY PUBLIC-KEY``.
RETIRED = "retired"
ACCOUNT_PATTERN = r"^[a-z0-9](?:[a-z0-9._@+-]{0,62}[a-z0-9])?$"


class TrustRootError(ValueError):
    """The pinned administrators' keys are unusable; the message says what to fix."""


class PinnedAdmin(IdentityKey):
    """One administrator the deployment trusts: a canonical identity and an Ed25519 public key."""


class TrustRoot(BaseModel):
    """The pinned administrators, and the name of the deployment that pins them (its settings', as pinned as the
    keys are). Empty means nobody can sign a registry change, so nobody is registered. The name is what keeps an
    administrator pinned by two deployments (staging and production, say) from having a statement signed for
    one count in the other: a row copied from one's table into the other's names the wrong deployment."""

    model_config = ConfigDict(frozen=True)

    admins: tuple[PinnedAdmin, ...] = ()
    deployment: str = Field(default=DEFAULT_DEPLOYMENT, pattern=DEPLOYMENT_PATTERN)
    retired: tuple[PinnedAdmin, ...] = Field(
        default=(), description="administrators' keys no longer pinned whose revocations and unbindings still count "
                                "(ENDING_KINDS only): a revocation must not lapse when its signer is rotated out")

    def admin(self, key: str) -> PinnedAdmin | None:
        return next((a for a in self.admins if a.key_id == key), None)

    def retired_admin(self, key: str) -> PinnedAdmin | None:
        return next((a for a in self.retired if a.key_id == key), None)

    @property
    def demo_identities(self) -> list[str]:
        return [a.identity for a in self.admins if a.identity.startswith(DEMO_PREFIX)]


def parse_pinned_admins(text: str, *, source: str = "the admin keys file",
                        deployment: str = DEFAULT_DEPLOYMENT) -> TrustRoot:
    """``identity base64-public-key`` a line, or ``retired identity base64-public-key`` for a key rotated out
    whose revocations still count; blank lines and ``#`` comments are skipped.

    Every malformed line is an error naming the line: a trust root is not something to guess about.
    """
    admins: list[PinnedAdmin] = []
    retired: list[PinnedAdmin] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        into = admins
        if len(parts) == 3 and parts[0] == RETIRED:
            into, parts = retired, parts[1:]
        if len(parts) != 2:
            raise TrustRootError(f"{source} line {number}: expected 'IDENTITY PUBLIC-KEY' or '{RETIRED} IDENTITY "
                                 f"PUBLIC-KEY', got {len(line.split())} fields")
        try:
            into.append(PinnedAdmin(identity=parts[0], public_key=parts[1]))
        except ValidationError as exc:
            reason = exc.errors()[0].get("msg", "invalid")
            raise TrustRootError(f"{source} line {number}: {reason}") from None
    for keys, what in ((admins, "pins"), (retired, "retires")):
        if len(keys) > MAX_PINNED_ADMINS:
            raise TrustRootError(f"{source} {what} {len(keys)} keys; at most {MAX_PINNED_ADMINS} are allowed")
        if len({a.key_id for a in keys}) != len(keys):
            raise TrustRootError(f"{source} {what} the same key twice; keep one line per key")
    if {a.key_id for a in admins} & {a.key_id for a in retired}:
        raise TrustRootError(f"{source} both pins and retires one key; a key is either pinned or retired")
    return TrustRoot(admins=tuple(admins), retired=tuple(retired), deployment=deployment)


class StatementKind(str, Enum):
    REGISTER_KEY = "register_key"  # subject: identity; body: KeyRegistration
    REVOKE_KEY = "revoke_key"  # subject: identity; body: {}
    BIND_ACCOUNT = "bind_account"  # subject: "<front end>/<account>"; body: AccountBinding
    UNBIND_ACCOUNT = "unbind_account"  # subject: "<front end>/<account>"; body: {}
    GRANT_CAPABILITY = "grant_capability"  # subject: grant id; body: the grant
    REVOKE_CAPABILITY = "revoke_capability"  # subject: grant id; body: {}


# Statements that only take away: a retired administrator's key still counts for these, never for a start.
ENDING_KINDS = frozenset({StatementKind.REVOKE_KEY, StatementKind.UNBIND_ACCOUNT, StatementKind.REVOKE_CAPABILITY})


class KeyRegistration(BaseModel):
    """What a register statement says about one person or front end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    public_key: str
    roles: tuple[Role, ...] = ()
    # For a front end: the identities it may sign for.
    speaks_for: tuple[Identity, ...] = ()
    # For a person: the front ends that may sign for them.
    front_ends: tuple[Identity, ...] = ()

    @field_validator("public_key")
    @classmethod
    def _decodes(cls, value: str) -> str:
        decode_public_key(value)
        return value

    @field_validator("roles", "speaks_for", "front_ends")
    @classmethod
    def _sorted_unique(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(set(value), key=str))


class AccountBinding(BaseModel):
    """A front end's account (a console user name) is this identity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    front_end: Identity
    account: str = Field(pattern=ACCOUNT_PATTERN)
    identity: Identity


class TrustStatement(BaseModel):
    """Everything an administrator's signature covers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: StatementKind
    subject: str = Field(min_length=1, max_length=200)
    body: dict[str, Any] = Field(default_factory=dict)
    deployment: str = Field(pattern=DEPLOYMENT_PATTERN)
    issued_at: datetime
    statement_id: str = Field(pattern=NONCE_PATTERN)
    signer: Identity
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")

    @field_validator("issued_at")
    @classmethod
    def _aware_whole_seconds(cls, value: datetime) -> datetime:
        return utc_expiry(value).replace(microsecond=0)


class SignedStatement(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    statement: TrustStatement
    signature: str = Field(max_length=128)


def statement_bytes(statement: TrustStatement) -> bytes:
    """The exact bytes signed: a domain tag (no other signed thing can pass for a trust statement), then
    canonical JSON (sorted keys, no spaces, ASCII; the issue time as epoch seconds)."""
    payload = statement.model_dump(mode="json")
    payload["issued_at"] = int(statement.issued_at.timestamp())
    return DOMAIN + json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def body_of(kind: StatementKind, body: BaseModel | None) -> dict[str, Any]:
    """The JSON body a statement of ``kind`` carries (validated by its model, so a signer cannot sign garbage)."""
    data = body.model_dump(mode="json") if body is not None else {}
    _typed_body(kind, data)
    return data


def _typed_body(kind: StatementKind, body: dict[str, Any]) -> BaseModel | None:
    if kind is StatementKind.REGISTER_KEY:
        return KeyRegistration.model_validate(body)
    if kind is StatementKind.BIND_ACCOUNT:
        return AccountBinding.model_validate(body)
    if kind is StatementKind.GRANT_CAPABILITY:
        return None  # judged by policy.capabilities where grants are read
    if body:
        raise ValueError(f"a {kind.value} statement carries no body")
    return None


def verify(signed: SignedStatement, root: TrustRoot) -> str | None:
    """Why ``signed`` counts for nothing, or None when a pinned administrator signed exactly this."""
    st = signed.statement
    admin = root.admin(st.key_id)
    if admin is None:
        admin = root.retired_admin(st.key_id)
        if admin is None:
            return f"signed by key {st.key_id}, which is not a pinned administrator's key"
        if st.kind not in ENDING_KINDS:
            return (f"signed by key {st.key_id}, retired from {admin.identity}: a retired key's revocations still "
                    "count, it starts nothing")
    if admin.identity != st.signer:
        return f"key {st.key_id} is pinned for {admin.identity}, not for {st.signer}"
    if not signature_valid(admin.public_key, statement_bytes(st), signed.signature):
        return "the signature does not match the statement; it was altered or signed for something else"
    if st.deployment != root.deployment:
        return f"signed for the deployment {st.deployment!r}, not for this one ({root.deployment!r})"
    try:
        _typed_body(st.kind, st.body)
    except (ValidationError, ValueError) as exc:
        return f"the body is not a valid {st.kind.value} ({exc.__class__.__name__})"
    if st.kind in (StatementKind.REGISTER_KEY, StatementKind.REVOKE_KEY):
        try:
            if canonical_identity(st.subject) != st.subject:
                return "the subject is not a canonical identity"
        except IdentityError:
            return "the subject is not an identity"
    if st.kind is StatementKind.BIND_ACCOUNT:
        binding = AccountBinding.model_validate(st.body)
        if st.subject != binding_subject(binding.front_end, binding.account):
            return "the subject does not name the bound account"
    return None


def binding_subject(front_end: str, account: str) -> str:
    return f"{front_end}/{account}"


class Ignored(BaseModel):
    """A stored statement that counts for nothing, and why (shown by `bamboo keys list`)."""

    model_config = ConfigDict(frozen=True)

    statement_id: str
    kind: str
    subject: str
    reason: str


class Registry(BaseModel):
    """The registry as the pinned administrators' statements make it."""

    model_config = ConfigDict(frozen=True)

    keys: tuple[RegisteredKey, ...] = ()
    bindings: tuple[AccountBinding, ...] = ()
    history: tuple[SignedStatement, ...] = ()
    ignored: tuple[Ignored, ...] = ()

    def account_identity(self, front_end: str, account: str) -> str | None:
        """The identity a front end's account is bound to, or None when no administrator bound it."""
        return next((b.identity for b in self.bindings if b.front_end == front_end and b.account == account), None)


_KEY_KINDS = (StatementKind.REGISTER_KEY, StatementKind.REVOKE_KEY)
_BINDING_KINDS = (StatementKind.BIND_ACCOUNT, StatementKind.UNBIND_ACCOUNT)
_ENDS = (StatementKind.REVOKE_KEY, StatementKind.UNBIND_ACCOUNT)


def _contested(ordered: list[SignedStatement]) -> list[SignedStatement]:
    """Registrations and bindings in force only by the random order of two different starts about one subject
    in one second (a key rotated in the second it was registered): which is the latest is unknown, so neither
    counts (an end in that second wins anyway). ``ordered`` as folded; the statements that lose their subject."""
    last: dict[tuple[bool, str], SignedStatement] = {}
    bodies: dict[tuple[StatementKind, str, datetime], set[str]] = {}
    for signed in ordered:
        st = signed.statement
        if st.kind in _KEY_KINDS + _BINDING_KINDS:
            last[(st.kind in _KEY_KINDS, st.subject)] = signed
            bodies.setdefault((st.kind, st.subject, st.issued_at), set()).add(json.dumps(st.body, sort_keys=True))
    return [w for w in last.values() if w.statement.kind not in _ENDS
            and len(bodies[(w.statement.kind, w.statement.subject, w.statement.issued_at)]) > 1]
_SAFE_ID = re.compile(r"^[0-9a-f]{32,64}\Z")


_LAPSING = frozenset(kind.value for kind in _ENDS)  # as an ignored row names its kind


def _lapsed(row: Ignored) -> Ignored:
    """``row``, an end that counts for nothing about a subject in force now, saying so: when its signer's key
    was removed from the admin keys file, what it ended came back without a word."""
    return row.model_copy(update={"reason": f"{row.reason}; {row.subject} is in force now: if an administrator "
                                            "since removed signed this, pin their key as retired (bamboo keys "
                                            "retire) or end it again"})


def fold_registry(rows: Iterable[SignedStatement | Ignored], root: TrustRoot) -> Registry:
    """Check every statement against ``root`` and fold the valid ones, oldest first by signed issue time.

    The latest statement about a subject decides: a registration replaces an earlier one (a rotated key, new
    roles), a revocation ends it, a later registration starts it again. A binding lets the bound front end speak
    for the bound identity, as a registration's ``speaks_for`` does. ``rows`` may hold rows the store could not
    even parse (as ``Ignored``), so every row is accounted for.
    """
    ignored: list[Ignored] = []
    valid: list[SignedStatement] = []
    seen: set[str] = set()
    for row in rows:
        if isinstance(row, Ignored):
            ignored.append(row)
            continue
        st = row.statement
        reason = verify(row, root)
        if reason is None and st.statement_id in seen:
            continue  # the same signed statement stored twice says nothing new
        if reason is not None:
            ignored.append(Ignored(statement_id=st.statement_id if _SAFE_ID.match(st.statement_id) else "?",
                                   kind=st.kind.value, subject=st.subject[:80], reason=reason))
            continue
        seen.add(st.statement_id)
        valid.append(row)
    # Issue times are whole seconds: within one, an end (revoke, unbind) goes after a start, so a revocation
    # signed in the second of the registration it ends is never undone by the random id's order.
    valid.sort(key=lambda s: (s.statement.issued_at, s.statement.kind in _ENDS, s.statement.statement_id))
    registrations: dict[str, KeyRegistration] = {}
    bindings: dict[str, AccountBinding] = {}
    for signed in valid:
        st = signed.statement
        if st.kind is StatementKind.REGISTER_KEY:
            registrations[st.subject] = KeyRegistration.model_validate(st.body)
        elif st.kind is StatementKind.REVOKE_KEY:
            registrations.pop(st.subject, None)
        elif st.kind is StatementKind.BIND_ACCOUNT:
            bindings[st.subject] = AccountBinding.model_validate(st.body)
        elif st.kind is StatementKind.UNBIND_ACCOUNT:
            bindings.pop(st.subject, None)
    for contested in _contested(valid):
        st = contested.statement
        (registrations if st.kind is StatementKind.REGISTER_KEY else bindings).pop(st.subject, None)
        ignored.append(Ignored(statement_id=st.statement_id, kind=st.kind.value, subject=st.subject[:80],
                               reason="another statement about this subject was signed in the same second, so "
                                      "which is the latest is unknown; an administrator signs the one meant again"))
    in_force = set(registrations) | set(bindings)
    ignored = [_lapsed(row) if row.kind in _LAPSING and row.subject in in_force else row for row in ignored]
    bound: dict[str, set[str]] = {}
    for binding in bindings.values():
        bound.setdefault(binding.front_end, set()).add(binding.identity)
    keys = tuple(
        RegisteredKey(identity=identity, public_key=reg.public_key, roles=frozenset(reg.roles),
                      speaks_for=frozenset(reg.speaks_for) | frozenset(bound.get(identity, ())),
                      front_ends=frozenset(reg.front_ends))
        for identity, reg in sorted(registrations.items()))
    return Registry(keys=keys, bindings=tuple(sorted(bindings.values(), key=lambda b: (b.front_end, b.account))),
                    history=tuple(s for s in valid if s.statement.kind in _KEY_KINDS + _BINDING_KINDS),
                    ignored=tuple(ignored))
