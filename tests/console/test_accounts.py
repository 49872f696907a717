"""Local console accounts: Argon2id hashes in a file only its owner can read, the same answer for a wrong
password and an unknown name, identities in their canonical spelling, and hashes upgraded when the
parameters get stronger."""

from __future__ import annotations

import stat

import pytest
from argon2 import PasswordHasher

from bamboo.frontends.console.accounts import AccountError, LocalAccounts


def test_accounts_verify_only_the_right_password_and_keep_no_password(tmp_path):
    path = tmp_path / "users.json"
    accounts = LocalAccounts(path, PasswordHasher(time_cost=1, memory_cost=8192))
    accounts.add("Alice", "correct horse battery")
    assert accounts.verify("alice", "correct horse battery") == "alice"
    assert accounts.verify("ALICE", "correct horse battery") == "alice"
    assert accounts.verify("alice", "wrong horse battery") is None
    assert accounts.verify("mallory", "correct horse battery") is None
    assert accounts.verify("not an identity!", "x") is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "correct horse" not in text and "$argon2id$" in text
    with pytest.raises(AccountError):
        accounts.add("bob", "short")


def test_a_hash_is_upgraded_when_the_parameters_get_stronger(tmp_path):
    path = tmp_path / "users.json"
    LocalAccounts(path, PasswordHasher(time_cost=1, memory_cost=8192)).add("alice", "correct horse battery")
    old = path.read_text()
    stronger = LocalAccounts(path, PasswordHasher(time_cost=2, memory_cost=16384))
    assert stronger.verify("alice", "correct horse battery") == "alice"
    assert path.read_text() != old and "m=16384,t=2" in path.read_text()
