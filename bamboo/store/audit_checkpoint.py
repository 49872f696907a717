"""Signed checkpoints: the audit chain's head, anchored outside the database.

A hash chain proves the rows it holds are linked; it cannot prove rows are missing after its last
one. `TRUNCATE audit` left a valid empty chain, deleting the newest rows left a valid shorter one,
and whoever can write the table can recompute every hash. So after each audit commit the worker
signs `(chain, seq, head hash)` with an Ed25519 key the database never sees and keeps the newest
checkpoint in a file outside it. `bamboo audit verify` then knows how far the chain must reach and
which hash it must pass through: a shorter or rewritten chain no longer verifies.

The file holds one checkpoint and only moves forward: it is overwritten (under a lock shared by
every worker on the host, and read under the same lock) only by a later one, and only after the
database shows the chain still passes through the current one — a worker that finds the chain
rewritten or cut behind its back refuses to sign the new head and says so in its log, so the
evidence stays. It is written in place, not renamed over: on ext4 a rename over an existing file
flushes its data first, which cost milliseconds on every audit commit.
A checkpoint is started once per chain, by the process that wrote the chain's first row or by the
explicit, audited `bamboo audit checkpoint --start-new`; each start is recorded in the database
(`audit_checkpoint_starts`), so a checkpoint file that disappears is a verification failure and is never
quietly started again over an existing chain.
What it does not defend against: someone who can write the checkpoint file (put back an older
one) or read the signing key, and who also, as the database's owner, removes the recorded starts. Keep the key
directory out of the database host's and the app role's reach; `verify` needs only the public key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Awaitable, Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ValidationError

log = logging.getLogger(__name__)

KEY_FILE = "audit-signing.key"
PUBLIC_KEY_FILE = "audit-signing.pub"
CHECKPOINT_FILE = "audit-checkpoint.json"


class CheckpointError(RuntimeError):
    """The checkpoint or its key cannot be read; the message says which file and what to do."""


class Checkpoint(BaseModel):
    chain: str
    seq: int
    head: str
    at: str
    signature: str = ""

    def payload(self) -> bytes:
        return json.dumps({"chain": self.chain, "seq": self.seq, "head": self.head, "at": self.at},
                          sort_keys=True, separators=(",", ":")).encode()


def create_signing_key(path: Path) -> None:
    """A new Ed25519 key (owner-readable only) with its public half beside it; an existing key is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public_key_path(path).write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def public_key_path(key_path: Path) -> Path:
    return key_path.with_name(PUBLIC_KEY_FILE) if key_path.name == KEY_FILE else key_path.with_suffix(".pub")


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The key, refused when group or others may read or write it (as ``KeyStore.load`` refuses an approver's): whoever
    reads it signs checkpoints, and a degraded sandbox run shares this host's files."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_mode & 0o077:  # the file read, not whatever the path names a moment later
                raise CheckpointError(f"the audit signing key {path} is readable or writable by group or others; run "
                                      f"chmod 600 {path}")
            data = fh.read()
        key = serialization.load_pem_private_key(data, password=None)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the audit signing key {path} ({exc}); check the file or "
                              "BAMBOO_AUDIT_SIGNING_KEY") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{path} is not an Ed25519 private key; point BAMBOO_AUDIT_SIGNING_KEY at one")
    return key


def load_public_key(key_path: Path) -> Ed25519PublicKey:
    """The public half: from the .pub file beside the key (all `verify` needs), else from the key."""
    pub = public_key_path(key_path)
    try:
        if pub.exists():
            key = serialization.load_pem_public_key(pub.read_bytes())
            if isinstance(key, Ed25519PublicKey):
                return key
            raise CheckpointError(f"{pub} is not an Ed25519 public key")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the audit public key {pub} ({exc})") from None
    return load_signing_key(key_path).public_key()


class CheckpointFile:
    """The newest signed checkpoint of one database's audit chain."""

    def __init__(self, path: Path, key_path: Path, *, sign: bool) -> None:
        self.path = path
        self.key_path = key_path
        self._signer = load_signing_key(key_path) if sign else None
        self._public = self._signer.public_key() if self._signer else load_public_key(key_path)
        self._lock: asyncio.Lock | None = None

    def read(self) -> Checkpoint | None:
        """The checkpoint as stored, unverified (None: no checkpoint written yet)."""
        if not self.path.exists():
            return None
        try:
            with self._locked(fcntl.LOCK_SH):
                return self._read_unlocked()
        except OSError as exc:
            raise CheckpointError(f"cannot read the audit checkpoint {self.path} ({exc})") from None

    def _read_unlocked(self) -> Checkpoint | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(f"cannot read the audit checkpoint {self.path} ({exc})") from None
        try:
            return Checkpoint.model_validate_json(text)
        except ValidationError:
            raise CheckpointError(f"the audit checkpoint {self.path} is not a checkpoint (altered or "
                                  "damaged); keep it for the investigation") from None

    @contextlib.contextmanager
    def _locked(self, how: int):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, how)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def signature_holds(self, checkpoint: Checkpoint) -> bool:
        try:
            self._public.verify(base64.b64decode(checkpoint.signature, validate=True), checkpoint.payload())
            return True
        except (InvalidSignature, ValueError):
            return False

    @property
    def key_id(self) -> str:
        """The signing key's public half, hashed: which key a recorded start of checkpoints used."""
        raw = self._public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return hashlib.sha256(raw).hexdigest()[:16]

    def set_aside(self) -> Path | None:
        """Move the current checkpoint out of the way (kept beside it as evidence) before a new start."""
        if not self.path.exists():
            return None
        kept = self.path.with_name(f"{self.path.name}.replaced-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
        with self._locked(fcntl.LOCK_EX):
            os.replace(self.path, kept)
        return kept

    async def advance(self, chain: str, seq: int, head: str,
                      passes_through: Callable[[int, str], Awaitable[bool]],
                      may_start: Callable[[int], Awaitable[bool]] | None = None) -> bool:
        """Replace the checkpoint with (seq, head) when that is later, and the chain still passes
        through the current one (`passes_through(seq, hash)` asks the database). True when written.

        The file lock is never held across an await: the current checkpoint is read, checked against
        the database, and only then is the lock taken, the file read again and — unchanged — written;
        had another writer moved it meanwhile, the check is made again against its checkpoint. So
        several stores in one process (or one blocked on the database) never stall the others.

        With no checkpoint yet, ``may_start(seq)`` decides whether one may be started at all (and records
        the start); without it nothing is started, so a removed checkpoint is never silently replaced."""
        if self._signer is None:
            raise CheckpointError("this checkpoint file was opened for verification only")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one writer per store; the file lock orders the rest
            for _ in range(100):
                try:
                    seen = self.read()
                except CheckpointError as exc:
                    log.error("not advancing the audit checkpoint: %s", exc)
                    return False
                if not await self._may_replace(seen, chain, seq, head, passes_through, may_start):
                    return False
                with self._locked(fcntl.LOCK_EX):
                    if self._read_unlocked() == seen:
                        self._write(chain, seq, head)
                        return True
            log.error("the audit checkpoint %s kept changing under this writer; not advancing it", self.path)
            return False

    async def _may_replace(self, current: Checkpoint | None, chain: str, seq: int, head: str,
                           passes_through: Callable[[int, str], Awaitable[bool]],
                           may_start: Callable[[int], Awaitable[bool]] | None) -> bool:
        if current is None:
            return may_start is not None and await may_start(seq)
        if current.chain != chain:
            log.error("the audit checkpoint %s belongs to chain %s, this database's chain is %s: not "
                      "replacing it (if the database was deliberately reset, move the old checkpoint away)",
                      self.path, current.chain, chain)
            return False
        if seq < current.seq or (seq == current.seq and head == current.head):
            return False
        if seq == current.seq or not await passes_through(current.seq, current.head):
            log.error("the audit chain no longer passes through its signed checkpoint (row %s of %s): rows "
                      "were removed or rewritten; the checkpoint is kept as evidence, run `bamboo audit "
                      "verify`", current.seq, current.at)
            return False
        return True

    def _write(self, chain: str, seq: int, head: str) -> None:
        assert self._signer is not None
        checkpoint = Checkpoint(chain=chain, seq=seq, head=head, at=datetime.now(timezone.utc).isoformat())
        checkpoint.signature = base64.b64encode(self._signer.sign(checkpoint.payload())).decode()
        data = checkpoint.model_dump_json().encode()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
