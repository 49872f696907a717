"""Issue 24, item 3: a console account is a person only through a binding a pinned administrator signed.

`bamboo console add-user newcomer --identity <an approver>` needed no credential, and signed in as that
account the console said "signed in as" the approver and approved the requester's kill.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from psycopg.types.json import Jsonb

from bamboo.approvals.admin import sign_statement
from bamboo.approvals.keys import KeyStore
from bamboo.frontends.console.accounts import LocalAccounts
from policy.signing import DEFAULT_DEPLOYMENT
from policy.trust_root import AccountBinding, StatementKind, binding_subject
from tests.console.conftest import CONSOLE_IDENTITY, PASSWORD, console_env
from tests.services import ROOT


async def _add_user(settings, accounts_file, tmp_path, keys, *args: str) -> subprocess.CompletedProcess:
    env = {**console_env(settings, accounts_file, tmp_path), "BAMBOO_KEYS_DIR": str(keys)}
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "console", "add-user", *args, "--password-stdin"],
        cwd=ROOT, env=env, input=PASSWORD + "\n", capture_output=True, text=True, timeout=120)


async def test_only_an_administrators_binding_makes_an_account_someone(
        stack, settings, services, accounts_file, console, browsers, http_clients, tmp_path):
    mine = tmp_path / "requester-keys"
    KeyStore(mine).create("newcomer")
    for admin in ([], ["--admin", "newcomer"], ["--admin", "test-admin"]):
        done = await _add_user(settings, accounts_file, tmp_path, mine, "newcomer", "--identity", "bob", *admin)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode != 0 and len(said) < 400, said
    assert "newcomer" not in LocalAccounts(accounts_file).names()

    # the account file is the deployment's, but suppose she can write it: a password and an identity claim
    LocalAccounts(accounts_file).add("newcomer", PASSWORD)
    data = json.loads(accounts_file.read_text())
    data["accounts"]["newcomer"]["identity"] = "bob"
    accounts_file.write_text(json.dumps(data))
    # and a binding row in the registry, signed by her own key under the administrator's name
    forged = sign_statement(KeyStore(mine).load("newcomer"), StatementKind.BIND_ACCOUNT,
                            binding_subject(CONSOLE_IDENTITY, "newcomer"),
                            AccountBinding(front_end=CONSOLE_IDENTITY, account="newcomer", identity="bob"),
                            deployment=DEFAULT_DEPLOYMENT)
    forged = forged.model_copy(update={"statement": forged.statement.model_copy(update={
        "signer": "test-admin", "key_id": stack.admin.key_id})})
    async with services.store.pool.connection() as conn:
        st = forged.statement
        await conn.execute("INSERT INTO trust_statements (statement_id, kind, subject, statement, signature) "
                           "VALUES (%s, %s, %s, %s, %s)", (st.statement_id, st.kind.value, st.subject,
                                                           Jsonb(st.model_dump(mode="json")), forged.signature))

    browser = browsers()
    await browser.get("/login")
    await browser.fill("#username", "newcomer")
    await browser.fill("#password", PASSWORD)
    await browser.click("#sign-in")
    refused = await browser.wait_text("not bound to an identity by an administrator")
    assert "signed in as" not in refused
    http = http_clients()
    answer = await asyncio.to_thread(http.sign_in, "newcomer")
    assert answer.status_code == 403
    assert (await asyncio.to_thread(http.page, "/approvals")).url.path == "/login"

    # the administrator binds it: now, and only now, it signs in as the bound person
    await stack.registry(services.store).bind(stack.admin, CONSOLE_IDENTITY, "newcomer", "reader")
    await browser.get("/login")
    await browser.fill("#username", "newcomer")
    await browser.fill("#password", PASSWORD)
    await browser.click("#sign-in")
    assert "signed in as reader" in await browser.wait_text("signed in as", "#who")
