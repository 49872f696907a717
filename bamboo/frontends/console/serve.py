"""Start the console: connect to Temporal and the store, load the console's key, check it may speak as a
front end, and serve the pages with uvicorn in the same event loop as the Temporal client."""

from __future__ import annotations

import uvicorn

from bamboo.app import Process, open_app
from bamboo.approvals.admin import embedded_admin
from bamboo.approvals.keys import KeyStore, SigningKeyError
from bamboo.approvals.registry import ApproverRegistry
from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.backend import ConsoleBackend
from bamboo.frontends.console.oidc import oidc_client
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from policy.approvers import Role


class ConsoleStartError(RuntimeError):
    """The console cannot start as configured; the message says what to do."""


async def provision_embedded_front_end(settings: Settings, console: ConsoleSettings, registry: ApproverRegistry):
    """In the embedded stack the console's key is registered as a front end by the stack's administrator (as
    the demo registers its people); a deployment with its own database registers it deliberately. Whom it
    may speak for is what the account bindings say."""
    keys = KeyStore(settings.resolved_keys_dir())
    key = keys.load(console.identity) if keys.exists(console.identity) else keys.create(console.identity)
    await registry.ensure(embedded_admin(settings), key.identity, key.public_key, {Role.FRONT_END})
    return key


async def serve(settings: Settings, console: ConsoleSettings, echo=print) -> None:
    if console.oidc_enabled and not console.oidc_identity_claim:
        raise ConsoleStartError(
            "single sign-on needs BAMBOO_CONSOLE_OIDC_IDENTITY_CLAIM: the ID-token claim that names a person's "
            "registered identity, one your identity provider never lets a person change or reuse (sub, or a login "
            "name it fixes; OpenID Connect does not promise preferred_username is unique)")
    accounts = LocalAccounts(console.resolved_users_file(settings))
    oidc = oidc_client(console)
    if not accounts.names() and oidc is None:
        raise ConsoleStartError(
            f"no console accounts in {accounts.path} and no single sign-on configured; add one with "
            "`bamboo console add-user NAME` (or set BAMBOO_CONSOLE_OIDC_DISCOVERY_URL and _CLIENT_ID)")
    opened = await open_app(settings, Process.CONSOLE)
    store = opened.store
    try:
        registry = opened.registry()
        if settings.embedded_database:
            key = await provision_embedded_front_end(settings, console, registry)
        else:
            try:
                key = KeyStore(settings.resolved_keys_dir()).load(console.identity)
            except SigningKeyError as exc:
                raise ConsoleStartError(str(exc)) from None
        client = await connect(settings)
        backend = ConsoleBackend(client, store, settings, key)
        if not await backend.front_end_registered():
            raise ConsoleStartError(
                f"the console's key {key.identity} ({key.key_id}) is not registered with the front_end role, so "
                f"sessions would refuse everything it signs; an administrator registers it: bamboo keys register "
                f"{key.identity} --public-key {key.public_key} --role front_end --admin ADMIN")
        app = create_app(backend, console, accounts, console.cookie_secret(settings), oidc)
        config = uvicorn.Config(app, host=console.host, port=console.port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        echo(f"Bamboo console on {console.base_url()} (signing as {key.identity} for the person signed in)")
        await server.serve()
    finally:
        await opened.close()
