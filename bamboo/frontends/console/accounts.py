"""Local console accounts for the embedded default: a user name and an Argon2id password hash
(argon2-cffi), in one JSON file the deployment owns (mode 0600).

The file says nothing about *who* an account is: the identity it signs in as is an account binding signed by
a pinned administrator (``policy.trust_root``), so writing this file (or an ``identity`` into it) makes nobody
an approver.

A wrong name and a wrong password take the same time and give the same answer, so the sign-in page does
not reveal which accounts exist. Hashes are upgraded when the library's parameters get stronger.

The file also keeps each sign-in's *generation*: a random value per local account (``Account.sign_ins``) and
per single-sign-on identity (``AccountFile.single_sign_on``). A sign-in carries the generation it started
under in its cookie, and the console compares it with the file's on every request (``auth.current_user``).
A new value is drawn when the person signs out, and whenever a password is set (``add``: a reset is a new
password); removing the account removes its value. So a copy of a cookie taken before any of those signs
nothing afterwards, though the cookie itself is still validly signed. A value is random, never a counter, so
an account removed and added again does not bring back the sign-ins of its first life. Signing out therefore
ends every sign-in of that account, in every browser: the simplest rule that also ends a copy nobody knows of.

Every change is a read-modify-write of the whole file, under a lock both in this process and across processes
(``bamboo console add-user`` writes it too), so a sign-out written by the console cannot undo a password reset
written in the same moment; the file is replaced atomically, so a reader never sees half of it.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel, Field

from policy.identity import canonical_identity

MIN_PASSWORD_LENGTH = 8

Via = Literal["local", "oidc"]


class AccountError(ValueError):
    """An account cannot be added or read; the message says what to do."""


def _new_generation() -> str:
    return secrets.token_urlsafe(24)


class Account(BaseModel):
    password_hash: str
    sign_ins: str = Field(default="", description="the generation its sign-ins must carry; empty in a file "
                                                  "written before generations existed: drawn at the next sign-in")


class AccountFile(BaseModel):
    accounts: dict[str, Account] = Field(default_factory=dict)
    single_sign_on: dict[str, str] = Field(
        default_factory=dict, description="identity signed in through single sign-on -> its sign-ins' generation")


class LocalAccounts:
    def __init__(self, path: Path, hasher: PasswordHasher | None = None) -> None:
        self.path = path
        self.hasher = hasher or PasswordHasher()
        self._dummy = self.hasher.hash("no such account")
        self._lock = threading.Lock()

    def _load(self) -> AccountFile:
        if not self.path.is_file():
            return AccountFile()
        try:
            return AccountFile.model_validate_json(self.path.read_text())
        except ValueError as exc:
            raise AccountError(f"{self.path} is not a console account file ({exc.__class__.__name__}); "
                               "fix or remove it and add the accounts again") from None

    def _save(self, data: AccountFile) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data.model_dump(mode="json"), indent=2, sort_keys=True))
        os.replace(tmp, self.path)

    @contextmanager
    def _changing(self) -> Iterator[AccountFile]:
        """The file's contents, saved on leaving, with every other writer (thread or process) kept out."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                data = self._load()
                yield data
                self._save(data)
            finally:
                os.close(fd)  # closing releases the lock

    def names(self) -> list[str]:
        return sorted(self._load().accounts)

    def add(self, name: str, password: str) -> str:
        """Add or replace an account's password; the canonical account name. Replacing a password ends every
        sign-in of the account (a new generation)."""
        name = canonical_identity(name)
        if len(password) < MIN_PASSWORD_LENGTH:
            raise AccountError(f"a console password needs at least {MIN_PASSWORD_LENGTH} characters")
        password_hash = self.hasher.hash(password)
        with self._changing() as data:
            data.accounts[name] = Account(password_hash=password_hash, sign_ins=_new_generation())
        return name

    def remove(self, name: str) -> bool:
        """Remove an account, and with it every sign-in it has."""
        key = canonical_identity(name)
        if key not in self._load().accounts:
            return False
        with self._changing() as data:
            removed = data.accounts.pop(key, None) is not None
        return removed

    def verify(self, name: str, password: str) -> str | None:
        """The canonical account name when ``password`` is right, else None (in the same time either way).
        Slow by design (Argon2id): the console runs it off its event loop."""
        try:
            key = canonical_identity(name)
        except ValueError:
            key = None
        account = self._load().accounts.get(key) if key else None
        try:
            self.hasher.verify(account.password_hash if account else self._dummy, password)
        except (VerificationError, InvalidHashError):
            return None
        if account is None or key is None:
            return None
        if self.hasher.check_needs_rehash(account.password_hash):
            upgraded = self.hasher.hash(password)
            with self._changing() as data:
                now = data.accounts.get(key)
                if now is not None and now.password_hash == account.password_hash:  # not reset meanwhile
                    data.accounts[key] = now.model_copy(update={"password_hash": upgraded})
        return key

    # ------------------------------------------------------------------ sign-in generations
    def sign_in_generation(self, via: Via, name: str) -> str | None:
        """The generation a new sign-in of ``name`` carries (drawn if it has none yet); None when ``name`` is a
        local account that does not exist (any more)."""
        if (current := self.current_generation(via, name)) is not None:
            return current
        with self._changing() as data:
            if via == "oidc":
                return data.single_sign_on.setdefault(name, _new_generation())
            account = data.accounts.get(name)
            if account is None:
                return None
            if not account.sign_ins:
                account.sign_ins = _new_generation()
            return account.sign_ins

    def current_generation(self, via: Via, name: str) -> str | None:
        """The generation a sign-in of ``name`` must carry now; None when none may be signed in (the account is
        gone, or it never had a sign-in since generations were kept)."""
        data = self._load()
        if via == "oidc":
            return data.single_sign_on.get(name)
        account = data.accounts.get(name)
        return account.sign_ins or None if account else None

    def end_sign_ins(self, via: Via, name: str) -> None:
        """End every sign-in of ``name`` (a sign-out): a new generation, which no cookie carries yet."""
        with self._changing() as data:
            if via == "oidc":
                data.single_sign_on[name] = _new_generation()
            elif (account := data.accounts.get(name)) is not None:
                account.sign_ins = _new_generation()
