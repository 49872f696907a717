"""Local console accounts for the embedded default: a user name and an Argon2id password hash
(argon2-cffi), in one JSON file the deployment owns (mode 0600).

The file says nothing about *who* an account is: the identity it signs in as is an account binding signed by
a pinned administrator (``policy.trust_root``), so writing this file (or an ``identity`` into it) makes nobody
an approver.

A wrong name and a wrong password take the same time and give the same answer, so the sign-in page does
not reveal which accounts exist. Hashes are upgraded when the library's parameters get stronger.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel, Field

from policy.identity import canonical_identity

MIN_PASSWORD_LENGTH = 8


class AccountError(ValueError):
    """An account cannot be added or read; the message says what to do."""


class Account(BaseModel):
    password_hash: str


class AccountFile(BaseModel):
    accounts: dict[str, Account] = Field(default_factory=dict)


class LocalAccounts:
    def __init__(self, path: Path, hasher: PasswordHasher | None = None) -> None:
        self.path = path
        self.hasher = hasher or PasswordHasher()
        self._dummy = self.hasher.hash("no such account")

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

    def names(self) -> list[str]:
        return sorted(self._load().accounts)

    def add(self, name: str, password: str) -> str:
        """Add or replace an account's password; the canonical account name."""
        name = canonical_identity(name)
        if len(password) < MIN_PASSWORD_LENGTH:
            raise AccountError(f"a console password needs at least {MIN_PASSWORD_LENGTH} characters")
        data = self._load()
        data.accounts[name] = Account(password_hash=self.hasher.hash(password))
        self._save(data)
        return name

    def remove(self, name: str) -> bool:
        data = self._load()
        removed = data.accounts.pop(canonical_identity(name), None) is not None
        if removed:
            self._save(data)
        return removed

    def verify(self, name: str, password: str) -> str | None:
        """The canonical account name when ``password`` is right, else None (in the same time either way)."""
        try:
            key = canonical_identity(name)
        except ValueError:
            key = None
        data = self._load()
        account = data.accounts.get(key) if key else None
        try:
            self.hasher.verify(account.password_hash if account else self._dummy, password)
        except (VerificationError, InvalidHashError):
            return None
        if account is None or key is None:
            return None
        if self.hasher.check_needs_rehash(account.password_hash):
            data.accounts[key] = account.model_copy(update={"password_hash": self.hasher.hash(password)})
            self._save(data)
        return key
