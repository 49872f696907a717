"""Signed operator statements: what exactly is signed, and how a workflow checks it.

Everything an operator sends a session (a message that asks for code, a decision on a review, a revoke, a
finalize, an abandon) can carry an ``Authorization``: an Ed25519 signature over a canonical statement that
names the session, the identity speaking, the signer (the same identity, or a registered front end such as a
web console that authenticated that person), the registered key's id, when it was signed, an expiry, a nonce,
and the body of the request, and the deployment it is for. A decision's body names the turn, the full code hash and the choice,
so a signature approves exactly one piece of code, in one session of one deployment, once, for a short time.

Signing happens in clients (``bamboo.approvals``); verification happens here, deterministically, inside the
workflow: the same bytes are built on both sides by ``statement_bytes``. The public keys come from the
deployment's registry (``policy.approvers``), never from the request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, field_validator

from policy.identity import Identity

DOMAIN = b"bamboo-signed-statement-v1\n"
# What a deployment is called unless its settings name it (BAMBOO_DEPLOYMENT). Every signed statement, an
# operator's request as much as an administrator's registry statement, names the deployment it was signed for
# and counts nowhere else: an approver registered in staging and production with one key signs for one of them.
DEFAULT_DEPLOYMENT = "default"
EMBEDDED_DEPLOYMENT = "embedded"
DEPLOYMENT_PATTERN = r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$"
NONCE_PATTERN = r"^[0-9a-f]{32,64}$"  # a pydantic pattern (Rust regex: "$" is the end of the text)
# How far a signer's clock may run ahead of the deployment's: a statement signed later than that is refused, and a
# revocation covers what was signed up to this long after it.
MAX_CLOCK_SKEW_S = 120
KEY_ID_LENGTH = 16
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


class StatementKind(str, Enum):
    MESSAGE = "message"
    DECISION = "decision"  # an answer to a session's pending code review
    # An approval of one command line at an executor (gate 6). Its own kind, never DECISION: both sign a hash in a
    # session, and code whose text is a command's review subject (a JSON dict, read-only Python) hashes to that
    # command's review hash, so an approval of that harmless-looking code would otherwise approve the write.
    COMMAND_APPROVAL = "command_approval"
    REVOKE = "revoke"
    FINALIZE = "finalize"
    ABANDON = "abandon"


class Authorization(BaseModel):
    """The signature part of a request. ``signer`` is whose registered key signed; ``key_id`` which key."""

    model_config = ConfigDict(frozen=True)

    signer: Identity
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    issued_at: datetime = Field(description="when it was signed (signed): a revocation covers what was signed before it")
    expires_at: datetime
    nonce: str = Field(pattern=NONCE_PATTERN)
    signature: str = Field(max_length=128)

    @field_validator("issued_at", "expires_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        """In whole seconds, as ``statement_bytes`` signs them: the fraction was carried but not signed, so
        whoever relayed a statement could push its expiry up to a second later with the signature still valid."""
        return utc_expiry(value).replace(microsecond=0)


class IdentityKey(BaseModel):
    """An identity and its Ed25519 public key (base64 of the raw 32 bytes), checked on the way in: what a
    registry entry, a pinned administrator and an executor's verification key each are, and more."""

    model_config = ConfigDict(frozen=True)

    identity: Identity
    public_key: str

    @field_validator("public_key")
    @classmethod
    def _decodes(cls, value: str) -> str:
        decode_public_key(value)
        return value

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)


def utc_expiry(value: datetime) -> datetime:
    """An expiry as an aware UTC time; a naive one is refused, since its zone would be a guess."""
    if value.tzinfo is None:
        raise ValueError("expires_at needs a time zone (use UTC, e.g. 2026-12-01T12:00:00Z)")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:  # 0001-01-01T00:00+05:00: pydantic wraps ValueError only, and readers catch its errors
        raise ValueError("expires_at is out of the range of times (year 1 to 9999 in UTC)") from None


def text_digest(text: str | None) -> str | None:
    """How long free text enters a statement: by its SHA-256, so the statement stays small."""
    if text is None:
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def key_id(public_key: str) -> str:
    """A short, stable id of a registered public key (base64 of the raw 32 bytes)."""
    return hashlib.sha256(decode_public_key(public_key)).hexdigest()[:KEY_ID_LENGTH]


def decode_public_key(public_key: str) -> bytes:
    try:
        raw = base64.b64decode(public_key, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("a public key is the base64 of 32 raw Ed25519 bytes") from exc
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError(f"a public key is the base64 of {PUBLIC_KEY_BYTES} raw Ed25519 bytes, got {len(raw)} bytes")
    return raw


def statement_bytes(
    kind: StatementKind,
    session_id: str,
    identity: str,
    body: dict[str, Any],
    signer: str,
    key: str,
    issued_at: datetime,
    expires_at: datetime,
    nonce: str,
    *,
    deployment: str,
) -> bytes:
    """The exact bytes that are signed. Canonical JSON (sorted keys, no spaces, ASCII) after a domain tag.

    ``deployment`` is the deployment the request is for: sessions are named by their requesters, so without it
    a decision signed in one deployment's session answered the same-named session of another deployment that
    registers the same approver key (the other's nonces and used-decision records have never seen it)."""
    payload = {
        "deployment": deployment,
        "kind": kind.value,
        "session": session_id,
        "identity": identity,
        "signer": signer,
        "key_id": key,
        "issued_at": int(issued_at.timestamp()),
        "expires_at": int(expires_at.timestamp()),
        "nonce": nonce,
        "body": body,
    }
    return DOMAIN + json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def signature_valid(public_key: str, message: bytes, signature: str) -> bool:
    """Whether ``signature`` (base64) is ``public_key``'s Ed25519 signature of ``message``."""
    try:
        raw = base64.b64decode(signature, validate=True)
        if len(raw) != SIGNATURE_BYTES:
            return False
        Ed25519PublicKey.from_public_bytes(decode_public_key(public_key)).verify(raw, message)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True
