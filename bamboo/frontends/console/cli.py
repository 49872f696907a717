"""`bamboo console` (serve the web console) and `bamboo console add-user` (a local account)."""

from __future__ import annotations

import getpass
import sys

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

    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
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
    identity: str = typer.Option(None, "--identity", help="the registered identity it acts as (default: the name)"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password from standard input"),
) -> None:
    """Add (or replace) a local console account with an Argon2id password hash."""
    from bamboo.frontends.console.accounts import AccountError, LocalAccounts
    from bamboo.frontends.console.settings import ConsoleSettings
    from policy.identity import IdentityError

    password = sys.stdin.readline().rstrip("\n") if password_stdin else getpass.getpass(f"password for {name}: ")
    accounts = LocalAccounts(ConsoleSettings().resolved_users_file(get_settings()))
    try:
        account = accounts.add(name, password, identity)
    except (AccountError, IdentityError) as exc:
        fail(str(exc))
        return
    out.print(f"console account {name} signs in as {account.identity} (stored in {accounts.path}); what it may do "
              "is the approver registry's answer (`bamboo keys list`)")


@console_app.command("remove-user")
def remove_user(name: str = typer.Argument(...)) -> None:
    """Remove a local console account."""
    from bamboo.frontends.console.accounts import LocalAccounts
    from bamboo.frontends.console.settings import ConsoleSettings

    accounts = LocalAccounts(ConsoleSettings().resolved_users_file(get_settings()))
    if not accounts.remove(name):
        fail(f"no console account {name}; `bamboo console users` lists them")
    out.print(f"console account {name} removed")


@console_app.command("users")
def list_users() -> None:
    """List the local console accounts."""
    from bamboo.frontends.console.accounts import LocalAccounts
    from bamboo.frontends.console.settings import ConsoleSettings

    accounts = LocalAccounts(ConsoleSettings().resolved_users_file(get_settings()))
    names = accounts.names()
    out.print("\n".join(names) if names else f"no console accounts in {accounts.path}")


def register(app: typer.Typer) -> None:
    app.add_typer(console_app, name="console")
