"""Operators' signing keys on disk, and signing a request with one.

A key is an Ed25519 private key in PKCS#8 PEM, one file per identity (``<identity>.pem``, mode 0600) in the
keys directory (``BAMBOO_KEYS_DIR``, default ``<data dir>/keys``). Only the public half is ever given to the
deployment (``bamboo keys register``); the private half never leaves the operator's machine. Signing builds
the exact bytes ``policy.signing.statement_bytes`` defines, so the workflow can verify what was signed.
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from policy.identity import canonical_identity
from policy.signing import Authorization, StatementKind, key_id, statement_bytes

DEFAULT_TTL_S = 15 * 60


class SigningKeyError(RuntimeError):
    """A key is missing, unreadable or would be overwritten; the message says what to do."""


@dataclass(frozen=True)
class LocalKey:
    identity: str
    private_key: Ed25519PrivateKey

    @property
    def public_key(self) -> str:
        raw = self.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return base64.b64encode(raw).decode("ascii")

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)

    def sign(self, message: bytes) -> str:
        """The base64 Ed25519 signature of ``message`` (what ``policy.signing.signature_valid`` checks)."""
        return base64.b64encode(self.private_key.sign(message)).decode("ascii")

    def authorize(
        self,
        kind: StatementKind,
        session_id: str,
        body: dict[str, Any],
        *,
        deployment: str,
        identity: str | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        now: datetime | None = None,
    ) -> Authorization:
        """Sign a request of ``kind`` in ``session_id`` of ``deployment`` (the name the deployment's settings give
        it: the signature counts there only); ``identity`` differs from the key's only for a front end."""
        speaker = canonical_identity(identity or self.identity)
        issued = (now or datetime.now(timezone.utc)).replace(microsecond=0)
        expires = issued + timedelta(seconds=ttl_s)
        nonce = secrets.token_hex(16)
        message = statement_bytes(kind, session_id, speaker, body, self.identity, self.key_id, issued, expires, nonce,
                                  deployment=deployment)
        signature = self.sign(message)
        return Authorization(signer=self.identity, key_id=self.key_id, issued_at=issued, expires_at=expires,
                             nonce=nonce, signature=signature)


class KeyStore:
    """The directory of one machine's operator keys."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.expanduser()

    def path(self, identity: str) -> Path:
        return self.directory / f"{canonical_identity(identity)}.pem"

    def exists(self, identity: str) -> bool:
        return self.path(identity).is_file()

    def create(self, identity: str, *, overwrite: bool = False) -> LocalKey:
        identity = canonical_identity(identity)
        path = self.path(identity)
        if path.exists() and not overwrite:
            raise SigningKeyError(f"a key for {identity} already exists at {path}; use it, or pass --force to replace it")
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        os.replace(tmp, path)
        return LocalKey(identity, key)

    def load(self, identity: str) -> LocalKey:
        identity = canonical_identity(identity)
        path = self.path(identity)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SigningKeyError(
                f"no signing key for {identity} in {self.directory}; create one with `bamboo keys create --as "
                f"{identity}` and have it registered (`bamboo keys register`)"
            ) from None
        except OSError as exc:
            raise SigningKeyError(f"cannot read the signing key {path}: {exc.strerror}") from None
        if os.stat(path).st_mode & 0o077:
            # A key others can read signs for whoever reads it (a degraded sandbox run shares this host's files).
            raise SigningKeyError(f"the signing key {path} is readable or writable by group or others; run chmod 600 "
                                  f"{path}")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"{path} is not an unencrypted Ed25519 PEM key ({exc}); create a new one") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(f"{path} holds a {type(key).__name__}, not an Ed25519 key; create a new one")
        return LocalKey(identity, key)
