"""The deployment's administrators: the keys it pins, and signing registry statements with one of them.

The pinned keys live in a file the deployment owns (``BAMBOO_ADMIN_KEYS_FILE``; on the embedded stack
``<data dir>/admin-keys``), never in the database: the app role that every worker, console and requester's
CLI connects with can write rows, not this file. Every process that relies on the registry (the worker
judging a session's requests, an executor at gates 3 and 6, the console at sign-in) reads it itself.

The embedded stack has one administrator, ``demo-admin``, whose key sits in the local keys directory next
to the demo's people: on the demo, one person holds every identity, and says so. A deployment with a
database of its own refuses to start with a ``demo-`` administrator pinned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from bamboo.approvals.keys import KeyStore, LocalKey, SigningKeyError
from bamboo.settings import Settings
from policy.identity import canonical_identity
from policy.signing import DEFAULT_DEPLOYMENT
from policy.trust_root import (
    DEMO_PREFIX,
    RETIRED,
    PinnedAdmin,
    SignedStatement,
    StatementKind,
    TrustRoot,
    TrustRootError,
    TrustStatement,
    body_of,
    parse_pinned_admins,
    statement_bytes,
)

DEMO_ADMIN = f"{DEMO_PREFIX}admin"
MAX_FILE_BYTES = 64 * 1024


class PinnedAdmins:
    """The pinned administrators, re-read when the file changes (an administrator added or removed takes
    effect without restarting the worker). A missing file pins nobody."""

    def __init__(self, path: Path | None, *, own_deployment: bool, deployment: str = DEFAULT_DEPLOYMENT,
                 named: bool = True) -> None:
        self.path = path
        self.own_deployment = own_deployment
        self.deployment = deployment
        self.named = named
        self._cache: tuple[tuple[int, int] | None, TrustRoot] | None = None

    @classmethod
    def of(cls, settings: Settings) -> "PinnedAdmins":
        return cls(settings.resolved_admin_keys_file(), own_deployment=not settings.embedded_database,
                   deployment=settings.resolved_deployment(), named=settings.deployment is not None)

    def root(self) -> TrustRoot:
        if self.own_deployment and not self.named:
            # Two deployments left unnamed both answered to "default": a decision signed in one counted in the other.
            raise TrustRootError(
                "BAMBOO_DEPLOYMENT is not set: a deployment with its own database names itself (staging, "
                "production), on its worker, executors, console and operators' clients, since every signed "
                "statement and approval counts only in the deployment it names (docs/trust-model.md)")
        stamp = self._stamp()
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        root = TrustRoot(deployment=self.deployment) if stamp is None or self.path is None else self._parse(self.path)
        self._cache = (stamp, root)
        return root

    def _stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _parse(self, path: Path) -> TrustRoot:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise TrustRootError(f"the admin keys file {path} is over {MAX_FILE_BYTES // 1024} KiB; it holds "
                                     "one 'IDENTITY PUBLIC-KEY' line per administrator")
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrustRootError(f"cannot read the admin keys file {path}: {exc}") from None
        root = parse_pinned_admins(text, source=str(path), deployment=self.deployment)
        if self.own_deployment and root.demo_identities:
            raise TrustRootError(
                f"{path} pins the embedded demo's administrator ({', '.join(root.demo_identities)}); a deployment "
                "with its own database pins its own administrators' keys (README, 'Administrators')")
        return root


class FixedAdmins:
    """A trust root given in code (tests, and tools that were handed one)."""

    def __init__(self, root: TrustRoot) -> None:
        self._root = root

    def root(self) -> TrustRoot:
        return self._root


def sign_statement(admin: LocalKey, kind: StatementKind, subject: str, body: BaseModel | None = None,
                   *, deployment: str, now: datetime | None = None) -> SignedStatement:
    """An administrator's signed statement of ``kind`` about ``subject``, for the deployment named (it counts
    in no other: the name comes from the trust root of the deployment the statement is written to)."""
    statement = TrustStatement(kind=kind, subject=subject, body=body_of(kind, body), deployment=deployment,
                               issued_at=(now or datetime.now(timezone.utc)).replace(microsecond=0),
                               statement_id=secrets.token_hex(16), signer=admin.identity, key_id=admin.key_id)
    return SignedStatement(statement=statement, signature=admin.sign(statement_bytes(statement)))


@contextlib.contextmanager
def _editing(path: Path) -> Iterator[None]:
    """Exclusive against every other ``pin`` or ``retire`` of the file: a lock on its directory, since ``retire``
    replaces the file (a lock on the file itself would be on the inode it replaces), so a key pinned while a
    retire rewrote the file is not lost."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def pin(path: Path, identity: str, public_key: str) -> bool:
    """Append an administrator's key to the admin keys file (created mode 0644: readable by the deployment's
    processes, writable by its owner only). False when that key is already pinned."""
    admin = PinnedAdmin(identity=identity, public_key=public_key)
    with _editing(path):
        return _append(path, admin)


def _append(path: Path, admin: PinnedAdmin) -> bool:
    existing = parse_pinned_admins(path.read_text(encoding="utf-8"), source=str(path)) if path.is_file() else TrustRoot()
    if existing.admin(admin.key_id) is not None:
        return False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        if fh.tell() == 0:
            fh.write("# Pinned administrators: IDENTITY PUBLIC-KEY a line. Only statements signed by these keys\n"
                     "# change the approver registry, console bindings and capability grants.\n")
        fh.write(f"{admin.identity} {admin.public_key}\n")
    return True


def retire(path: Path, identity: str) -> int:
    """Mark every key pinned for ``identity`` in the admin keys file as retired (``retired IDENTITY KEY``): the
    administrator signs nothing new, and the revocations and unbindings they signed keep counting (deleting the
    line dropped those too, and what they had ended came back). The file is rewritten whole through a temporary
    file in its directory, comments kept, so a reader never sees half of it. Returns how many keys were retired."""
    who = canonical_identity(identity)
    with _editing(path):
        return _rewrite_retired(path, who)


def _rewrite_retired(path: Path, who: str) -> int:
    text = path.read_text(encoding="utf-8")
    parse_pinned_admins(text, source=str(path))  # refuse to rewrite a file that does not parse
    lines, retired = [], 0
    for raw in text.splitlines(keepends=True):
        parts = raw.split("#", 1)[0].split()
        if len(parts) == 2 and canonical_identity(parts[0]) == who:
            raw, retired = f"{RETIRED} {who} {parts[1]}\n", retired + 1
        lines.append(raw)
    if retired:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(lines))
            os.chmod(temporary, path.stat().st_mode & 0o777)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
    return retired


def embedded_admin(settings: Settings) -> LocalKey:
    """The embedded stack's administrator: created and pinned on first use. Refused on a deployment of its own."""
    if not settings.embedded_database:
        raise TrustRootError("only the embedded stack provisions its own administrator; pin your administrators' "
                             "keys in BAMBOO_ADMIN_KEYS_FILE (README, 'Administrators')")
    keys = KeyStore(settings.resolved_keys_dir())
    key = keys.load(DEMO_ADMIN) if keys.exists(DEMO_ADMIN) else keys.create(DEMO_ADMIN)
    path = settings.resolved_admin_keys_file()
    assert path is not None  # the embedded stack always has one
    pin(path, key.identity, key.public_key)
    return key


def admin_key(settings: Settings, identity: str | None) -> LocalKey:
    """The local private key of the administrator who signs, checked against the pinned keys first, so a
    statement nobody will honour is never written. ``identity`` defaults to the embedded stack's admin."""
    if identity is None:
        if not settings.embedded_database:
            raise TrustRootError("name the administrator who signs this with --admin (a key pinned in "
                                 "BAMBOO_ADMIN_KEYS_FILE, with its private half in your keys directory)")
        return embedded_admin(settings)
    try:
        key = KeyStore(settings.resolved_keys_dir()).load(identity)
    except SigningKeyError as exc:
        raise TrustRootError(str(exc)) from None
    if PinnedAdmins.of(settings).root().admin(key.key_id) is None:
        where = settings.resolved_admin_keys_file() or "BAMBOO_ADMIN_KEYS_FILE (not set)"
        raise TrustRootError(f"{key.identity}'s key {key.key_id} is not a pinned administrator's key; only keys "
                             f"listed in {where} may change the registry")
    return key
