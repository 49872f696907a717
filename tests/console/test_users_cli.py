"""`bamboo console users` lists the local accounts for people and, with --json, for scripts."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bamboo.cli.main import app
from bamboo.frontends.console.accounts import LocalAccounts


def test_console_users_lists_accounts_as_text_and_as_json(tmp_path: Path, monkeypatch) -> None:
    users = tmp_path / "console-users.json"
    accounts = LocalAccounts(users)
    for name in ("alice", "bob"):
        accounts.add(name, "a long enough password 1")
    monkeypatch.setenv("BAMBOO_CONSOLE_USERS_FILE", str(users))

    text = CliRunner().invoke(app, ["console", "users"])
    assert text.exit_code == 0 and text.output.split() == ["alice", "bob"], text.output

    as_json = CliRunner().invoke(app, ["console", "users", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == {"users_file": str(users), "users": ["alice", "bob"]}


def test_console_users_json_with_no_accounts_is_an_empty_list(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("BAMBOO_CONSOLE_USERS_FILE", str(tmp_path / "none.json"))
    as_json = CliRunner().invoke(app, ["console", "users", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["users"] == [], as_json.output
