"""`bamboo keys` (operators' signing keys and the deployment's approver registry) and `bamboo sign`.

    bamboo keys create --as alice                 a key pair on this machine; prints the public half
    bamboo keys register alice --role approve     the deployment records alice's public key and roles
    bamboo keys list [--json] | revoke alice
    bamboo sign decide SESSION HASH y --as bob    the JSON input for `temporal workflow signal --name decide`

Registering needs the deployment's database (it is the deployment's decision who may approve what); the
private key never leaves the operator's keys directory (BAMBOO_KEYS_DIR, default <data dir>/keys).
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from bamboo.approvals.keys import DEFAULT_TTL_S, KeyStore, SigningKeyError
from bamboo.cli.common import console, fail, run
from bamboo.settings import get_settings
from policy.approvers import Role
from policy.identity import IdentityError, canonical_identity

keys_app = typer.Typer(help="Signing keys and the approver registry.", no_args_is_help=True)
sign_app = typer.Typer(help="Sign a request for `temporal workflow signal` / `update execute`.", no_args_is_help=True)

ROLE_HELP = ("request (ask for code), approve (approve read-only code), approve_state_changing (approve code "
             "that changes state), front_end (a console or bot that signs for the person it authenticated)")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
    app.add_typer(sign_app, name="sign")


def _identity(text: str | None) -> str:
    from bamboo.cli.investigate_cmd import default_identity

    try:
        return canonical_identity(text or default_identity())
    except IdentityError as exc:
        fail(str(exc))
        raise


@keys_app.command("create")
def keys_create(
    identity: str | None = typer.Option(None, "--as", help="whose key (default: $BAMBOO_OPERATOR or your login)"),
    force: bool = typer.Option(False, "--force", help="replace an existing key (the old one stops working)"),
) -> None:
    """Create an Ed25519 signing key in your keys directory and print the public key to register."""
    who = _identity(identity)
    store = KeyStore(get_settings().resolved_keys_dir())
    try:
        key = store.create(who, overwrite=force)
    except SigningKeyError as exc:
        fail(str(exc))
        return
    console.print(f"key for [bold]{who}[/] written to {store.path(who)} (keep it private)")
    console.print(f"public key {key.public_key}  key id {key.key_id}")
    console.print(f"register it: bamboo keys register {who} --public-key {key.public_key} --role request --role approve")


@keys_app.command("register")
def keys_register(
    identity: str = typer.Argument(..., help="the person's identity (letter case does not matter)"),
    role: list[Role] = typer.Option(..., "--role", help=ROLE_HELP),
    public_key: str | None = typer.Option(None, "--public-key", help="base64 public key (default: this machine's key)"),
    by: str | None = typer.Option(None, "--as", help="who registers it (recorded in the audit log)"),
) -> None:
    """Record a public key and roles in the deployment's approver registry (audited)."""
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.cli.store_access import opened_store

    settings = get_settings()
    who, admin = _identity(identity), _identity(by)
    if public_key is None:
        try:
            public_key = KeyStore(settings.resolved_keys_dir()).load(who).public_key
        except SigningKeyError as exc:
            fail(f"{exc}; or pass --public-key")
            return

    async def go():
        async with opened_store(settings) as store:
            return await ApproverRegistry(store.pool, store.audit).register(who, public_key, role, admin)

    try:
        entry = run(go())
    except ValueError as exc:
        fail(f"{exc}")
        return
    console.print(f"registered {entry.identity} (key {entry.key_id}) with roles "
                  f"{', '.join(sorted(r.value for r in entry.roles))}")


@keys_app.command("list")
def keys_list(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """The approver registry: identities, key ids, roles, who registered them, revoked ones."""
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await ApproverRegistry(store.pool, store.audit).entries()

    entries = run(go())
    if as_json:
        print(json.dumps([e.model_dump(mode="json") for e in entries]))
        return
    if not entries:
        console.print("no approvers registered (with signatures required, nobody can ask for code or approve it)")
        return
    table = Table("identity", "key id", "roles", "registered by", "registered", "revoked")
    for column in table.columns:
        column.overflow = "fold"
    for e in entries:
        table.add_row(e.identity, e.key_id, ", ".join(r.value for r in e.roles), e.registered_by, e.registered_at,
                      e.revoked_at or "")
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    identity: str = typer.Argument(...),
    by: str | None = typer.Option(None, "--as", help="who revokes it (recorded in the audit log)"),
) -> None:
    """Remove an identity from the registry: its signatures are refused from the next decision on."""
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.cli.store_access import opened_store

    who, admin = _identity(identity), _identity(by)

    async def go():
        async with opened_store(get_settings()) as store:
            return await ApproverRegistry(store.pool, store.audit).revoke(who, admin)

    if not run(go()):
        fail(f"{who} is not an active registered identity; `bamboo keys list` shows the registry")
    console.print(f"revoked {who}")


# --------------------------------------------------------------------------------- sign
def _signed_json(session: str, name: str, request, identity: str | None, ttl: float) -> None:
    from bamboo.investigation import client as inv

    settings = get_settings()
    who = _identity(identity)
    try:
        speaker = inv.Speaker(who, KeyStore(settings.resolved_keys_dir()).load(who), ttl)
    except SigningKeyError as exc:
        fail(str(exc))
        return
    print(speaker.sign(name, session, request).model_dump_json(exclude_none=True))


@sign_app.command("decide")
def sign_decide(
    session: str = typer.Argument(..., help="session id"),
    code_hash: str = typer.Argument(..., help="the full code hash, or a prefix of the pending one (looked up)"),
    decision: str = typer.Argument(..., help="y (run once), a (auto-run), k (always ask), n (reject)"),
    turn: int | None = typer.Option(None, "--turn", help="the turn answered (with a full hash, nothing is looked up)"),
    identity: str | None = typer.Option(None, "--as", help="who decides (default: $BAMBOO_OPERATOR or your login)"),
    ttl: float = typer.Option(DEFAULT_TTL_S, "--ttl", min=1, help="seconds the signature stays valid"),
) -> None:
    """Print a signed decision, for `temporal workflow signal --name decide --input "$(bamboo sign decide ...)"`."""
    from bamboo.investigation import client as inv
    from bamboo.temporal_client import connect
    from policy.decisions import DecisionKind, OperatorDecision

    try:
        kind = inv.parse_decision(decision)
    except inv.InvestigationError as exc:
        fail(str(exc))
        return
    if kind is DecisionKind.EDIT:
        fail("sign an edit from an attached session (`bamboo investigate --attach SESSION`)")
    full = code_hash.strip().lower()
    if turn is None or len(full) != 64:
        async def lookup():
            view = await inv.pending(await connect(get_settings()), session)
            if view is None or not view.code_hash.startswith(full):
                return None
            return view

        view = run(lookup())
        if view is None:
            fail(f"session {session} has no pending review with hash {code_hash}; `bamboo approvals` lists them")
            return
        turn, full = view.turn, view.code_hash
    request = OperatorDecision(turn=turn, code_hash=full, kind=kind, approver=_identity(identity))
    _signed_json(session, "decide", request, identity, ttl)


@sign_app.command("message")
def sign_message(
    session: str = typer.Argument(...),
    text: str = typer.Argument(..., help="what you ask"),
    tool: bool = typer.Option(False, "--tool", help="a tool turn (skip the intent classifier)"),
    identity: str | None = typer.Option(None, "--as"),
    ttl: float = typer.Option(DEFAULT_TTL_S, "--ttl", min=1),
) -> None:
    """Print a signed message, for `temporal workflow signal --name message --input ...`."""
    from bamboo.investigation.contract import OperatorMessage

    _signed_json(session, "message", OperatorMessage(text=text, author=_identity(identity), force_tool=tool),
                 identity, ttl)


@sign_app.command("revoke")
def sign_revoke(
    session: str = typer.Argument(...),
    target: str = typer.Argument(..., help="a code hash prefix, a proc__ name, or all"),
    identity: str | None = typer.Option(None, "--as"),
    ttl: float = typer.Option(DEFAULT_TTL_S, "--ttl", min=1),
) -> None:
    """Print a signed revoke request."""
    from bamboo.investigation.contract import RevokeRequest

    _signed_json(session, "revoke", RevokeRequest(target=target, actor=_identity(identity)), identity, ttl)
