"""`bamboo console` (serve the web console) and `bamboo console add-user` (a local account)."""

from __future__ import annotations

import getpass
import json
import sys
from typing import Any

import typer

from bamboo.cli.common import console as out
from bamboo.cli.common import fail, run
from bamboo.settings import get_settings

console_app = typer.Typer(help="The web console: reviews, sessions, grants, batches and the audit chain.",
                          invoke_without_command=True)


@console_app.callback()
def serve_console(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="address to listen on (default BAMBOO_CONSOLE_HOST, 127.0.0.1)"),
    port: int = typer.Option(None, "--port", min=0, max=65535, help="port (default BAMBOO_CONSOLE_PORT, 8240)"),
) -> None:
    """Serve the console (this is what `bamboo console` without a sub-command does)."""
    if ctx.invoked_subcommand is not None:
        return
    from temporalio.service import RPCError

    from bamboo.frontends.console.accounts import AccountError
    from bamboo.frontends.console.serve import ConsoleStartError, serve
    from bamboo.frontends.console.settings import ConsoleSettings
    from bamboo.store import StoreNotConfigured
    from bamboo.temporal_client import TemporalUnavailable

    overrides: dict[str, Any] = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    settings = ConsoleSettings(**overrides)
    try:
        run(serve(get_settings(), settings, echo=out.print))
    except (ConsoleStartError, AccountError, StoreNotConfigured, ConnectionError, TemporalUnavailable) as exc:
        fail(str(exc))
    except RPCError as exc:
        fail(f"Temporal refused the console: {exc.message}")


@console_app.command("add-user")
def add_user(
    name: str = typer.Argument(..., help="the user name to sign in with"),
    identity: str = typer.Option(None, "--identity", help="the registered identity it signs in as (default: the name)"),
    admin: str = typer.Option(None, "--admin", help="the pinned administrator who signs the binding (its private key "
                                                    "in your keys directory); default on the embedded stack: demo-admin"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password from standard input"),
) -> None:
    """Add (or replace) a local console account: an Argon2id password hash in the accounts file, and the
    binding of the account to an identity, signed by a pinned administrator (nobody else can bind one)."""
    from bamboo.approvals.admin import PinnedAdmins, admin_key
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.cli.store_access import opened_store
    from bamboo.frontends.console.accounts import AccountError, LocalAccounts
    from bamboo.frontends.console.settings import ConsoleSettings
    from policy.identity import IdentityError, canonical_identity
    from policy.trust_root import TrustRootError

    settings, console_settings = get_settings(), ConsoleSettings()
    try:
        account, who = canonical_identity(name), canonical_identity(identity or name)
        signer = admin_key(settings, None if admin is None else canonical_identity(admin))
    except (IdentityError, TrustRootError) as exc:
        fail(str(exc))
        return
    password = sys.stdin.readline().rstrip("\n") if password_stdin else getpass.getpass(f"password for {name}: ")
    accounts = LocalAccounts(console_settings.resolved_users_file(settings))

    async def bind() -> None:
        async with opened_store(settings) as store:
            registry = ApproverRegistry(store.pool, store.audit, PinnedAdmins.of(settings))
            await registry.bind(signer, console_settings.identity, account, who)

    try:
        accounts.add(account, password)
        run(bind())
    except (AccountError, IdentityError, TrustRootError, ValueError) as exc:
        fail(str(exc).splitlines()[0])
        return
    out.print(f"console account {account} signs in as {who} (password in {accounts.path}; binding signed by "
              f"{signer.identity}); what it may do is the approver registry's answer (`bamboo keys list`)")


@console_app.command("users")
def list_users(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the local console accounts."""
    from bamboo.frontends.console.accounts import LocalAccounts
    from bamboo.frontends.console.settings import ConsoleSettings

    accounts = LocalAccounts(ConsoleSettings().resolved_users_file(get_settings()))
    names = accounts.names()
    if as_json:
        print(json.dumps({"users_file": str(accounts.path), "users": names}, indent=2))
        return
    out.print("\n".join(names) if names else f"no console accounts in {accounts.path}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(console_app, name="console")
