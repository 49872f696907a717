"""`bamboo keys` (operators' signing keys and the deployment's approver registry) and `bamboo sign`.

    bamboo keys create --as alice                 a key pair on this machine; prints the public half
    bamboo keys pin ops-admin                     pin an administrator's key (BAMBOO_ADMIN_KEYS_FILE)
    bamboo keys register alice --role approve --admin ops-admin
                                                  a registration signed by a pinned administrator
    bamboo keys list [--json] [--history] | revoke alice --admin ops-admin
    bamboo sign decide SESSION HASH y --as bob    the JSON input for `temporal workflow signal --name decide`

Registering needs a pinned administrator's private key: the database only stores the signed statement,
and every reader checks it against the keys the deployment pinned (docs/trust-model.md). A private key never
leaves its owner's keys directory (BAMBOO_KEYS_DIR, default <data dir>/keys).
"""

from __future__ import annotations

import json
from typing import Any

import typer
from pydantic import ValidationError
from rich.table import Table

from bamboo.approvals.keys import DEFAULT_TTL_S, KeyStore, SigningKeyError
from bamboo.cli.common import console, fail, run, verdict
from bamboo.frontends.inert_text import inert_markup
from bamboo.investigation.contract import Message
from bamboo.settings import get_settings
from policy.approvers import Role
from policy.identity import IdentityError, canonical_identity
from policy.trust_root import TrustRootError

keys_app = typer.Typer(help="Signing keys, the pinned administrators and the approver registry they sign.",
                       no_args_is_help=True)
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
    console.print(f"an administrator registers it: bamboo keys register {who} --public-key {key.public_key} "
                  "--role request --admin ADMIN")


@keys_app.command("pin")
def keys_pin(
    identity: str = typer.Argument(..., help="the administrator's identity"),
    public_key: str | None = typer.Option(None, "--public-key", help="base64 public key (default: this machine's key)"),
) -> None:
    """Pin an administrator's public key in the deployment's admin keys file (BAMBOO_ADMIN_KEYS_FILE).

    Only statements signed by a pinned key change the registry. Run it where the worker, executors and console
    read their settings, as the account that owns that file."""
    from bamboo.approvals.admin import pin

    settings = get_settings()
    who = _identity(identity)
    path = settings.resolved_admin_keys_file()
    if path is None:
        fail("no admin keys file: set BAMBOO_ADMIN_KEYS_FILE to a file the database's app role cannot write")
        return
    try:
        if public_key is None:
            public_key = KeyStore(settings.resolved_keys_dir()).load(who).public_key
        added = pin(path, who, public_key)
    except (SigningKeyError, TrustRootError, ValueError) as exc:
        fail(str(exc).splitlines()[0])
        return
    console.print(f"{'pinned' if added else 'already pinned'}: {who} in {path}")


@keys_app.command("retire")
def keys_retire(identity: str = typer.Argument(..., help="the administrator rotated out or leaving")) -> None:
    """Retire an administrator's pinned keys in the admin keys file: they sign nothing new, and the revocations
    and unbindings they signed keep counting. Deleting their line instead drops those too, and whoever they
    revoked is registered again (`bamboo keys list` flags such revocations). Run it where `keys pin` runs."""
    from bamboo.approvals.admin import retire

    settings = get_settings()
    who = _identity(identity)
    path = settings.resolved_admin_keys_file()
    if path is None or not path.is_file():
        fail("no admin keys file to change: set BAMBOO_ADMIN_KEYS_FILE to the deployment's pinned keys")
        return
    try:
        count = retire(path, who)
    except (OSError, TrustRootError, ValueError) as exc:
        fail(f"cannot retire {who} in {path}: {str(exc).splitlines()[0]}")
        return
    if count == 0:
        fail(f"{who} has no pinned key in {path}; `cat` the file to see who is pinned")
    console.print(f"retired {count} key(s) of {who} in {path}: their revocations still count, they sign nothing "
                  "new; pin the successor's key with `bamboo keys pin`")


def _admin(admin: str | None, as_json: bool = False, body: dict[str, Any] | None = None):
    """The signing administrator's key; a key that is not pinned is the command's refused verdict."""
    from bamboo.approvals.admin import admin_key

    try:
        return admin_key(get_settings(), None if admin is None else _identity(admin))
    except TrustRootError as exc:
        verdict(as_json, False, body or {}, str(exc))
        raise


def _registry(store):
    from bamboo.approvals.admin import PinnedAdmins
    from bamboo.approvals.registry import ApproverRegistry

    return ApproverRegistry(store.pool, store.audit, PinnedAdmins.of(get_settings()))


ADMIN_HELP = ("the pinned administrator who signs this (its private key in your keys directory); "
              "default on the embedded stack: its demo-admin")


@keys_app.command("register")
def keys_register(
    identity: str = typer.Argument(..., help="the person's or front end's identity (letter case does not matter)"),
    role: list[Role] = typer.Option(..., "--role", help=ROLE_HELP),
    public_key: str | None = typer.Option(None, "--public-key", help="base64 public key (default: this machine's key)"),
    speaks_for: list[str] = typer.Option([], "--speaks-for", help="for a front end: an identity it may sign for"),
    front_end: list[str] = typer.Option([], "--front-end", help="for a person: a front end that may sign for them"),
    admin: str | None = typer.Option(None, "--admin", help=ADMIN_HELP),
    as_json: bool = typer.Option(False, "--json", help="the verdict as JSON (accepted, or refused and why); "
                                                       "the exit status is the same"),
) -> None:
    """Register (or rotate, or change the roles of) a key: a new statement signed by a pinned administrator.

    The previous statement stays in the history (`bamboo keys list --history`)."""
    from bamboo.cli.store_access import opened_store

    settings = get_settings()
    who = _identity(identity)
    scope_for = [_identity(i) for i in speaks_for]
    scope_by = [_identity(i) for i in front_end]
    signer = _admin(admin, as_json, {"identity": who})
    if public_key is None:
        try:
            public_key = KeyStore(settings.resolved_keys_dir()).load(who).public_key
        except SigningKeyError as exc:
            fail(f"{exc}; or pass --public-key")
            return

    async def go():
        async with opened_store(settings) as store:
            return await _registry(store).register(signer, who, public_key, role, speaks_for=scope_for,
                                                   front_ends=scope_by)

    try:
        entry = run(go())
    except (ValueError, TrustRootError) as exc:
        verdict(as_json, False, {"identity": who}, str(exc).splitlines()[0])
        return
    scope = (f"; speaks for {', '.join(sorted(entry.speaks_for))}" if entry.speaks_for else "") + \
        (f"; front ends {', '.join(sorted(entry.front_ends))}" if entry.front_ends else "")
    verdict(as_json, True, {**entry.model_dump(mode="json"), "signed_by": signer.identity},
            f"registered {entry.identity} (key {entry.key_id}) with roles "
            f"{', '.join(sorted(r.value for r in entry.roles))}{scope}, signed by {signer.identity}")


@keys_app.command("list")
def keys_list(
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    history: bool = typer.Option(False, "--history", help="every signed statement, oldest first"),
) -> None:
    """The registry as the pinned administrators signed it, the console bindings, and rows that count for
    nothing (not signed by a pinned administrator).

    A stored row's subject, kind, reason and account are written by whoever holds the app role's database password
    (docs/trust-model.md): printed inert and on one line (rich's ``escape`` left escape sequences that redrew the
    warning above them), and as ASCII JSON with ``--json`` (C1 controls and bidi overrides as ``\\u`` escapes)."""
    from bamboo.cli.store_access import opened_store

    async def go():
        async with opened_store(get_settings()) as store:
            return await _registry(store).registry()

    try:
        registry = run(go())
    except TrustRootError as exc:
        fail(str(exc))
        return
    if as_json:
        shown = {"keys", "bindings", "ignored"} | ({"history"} if history else set())
        print(json.dumps(registry.model_dump(mode="json", include=shown), ensure_ascii=True))
        return
    if not registry.keys:
        console.print("no approvers registered (with signatures required, nobody can ask for code or approve it)")
    else:
        table = Table("identity", "key id", "roles", "speaks for", "front ends")
        for column in table.columns:
            column.overflow = "fold"
        for k in registry.keys:
            table.add_row(k.identity, k.key_id, ", ".join(sorted(r.value for r in k.roles)),
                          ", ".join(sorted(k.speaks_for)), ", ".join(sorted(k.front_ends)))
        console.print(table)
    for b in registry.bindings:
        console.print(f"console binding: {b.front_end} account {inert_markup(b.account, one_line=True)} signs in as "
                      f"{b.identity}")
    if history:
        for s in registry.history:
            st = s.statement
            console.print(f"{st.issued_at.isoformat()} {st.kind.value} {inert_markup(st.subject, one_line=True)} by "
                          f"{st.signer} (key {st.key_id}, statement {st.statement_id[:12]})")
    if registry.ignored:
        console.print(f"[yellow]{len(registry.ignored)} stored statement(s) count for nothing[/] (not signed by a "
                      "pinned administrator):")
        for row in registry.ignored[:20]:
            console.print(f"  {inert_markup(row.kind, one_line=True)} {inert_markup(row.subject, one_line=True)}: "
                          f"{inert_markup(row.reason, one_line=True)}")


@keys_app.command("revoke")
def keys_revoke(
    identity: str = typer.Argument(...),
    admin: str | None = typer.Option(None, "--admin", help=ADMIN_HELP),
    as_json: bool = typer.Option(False, "--json", help="the verdict as JSON (accepted, or refused and why); "
                                                       "the exit status is the same"),
) -> None:
    """Revoke an identity (a signed statement): its signatures are refused from the next decision on."""
    from bamboo.cli.store_access import opened_store

    who = _identity(identity)
    signer = _admin(admin, as_json, {"identity": who})

    async def go():
        async with opened_store(get_settings()) as store:
            return await _registry(store).revoke(signer, who)

    body = {"identity": who, "revoked_by": signer.identity}
    if not run(go()):
        verdict(as_json, False, body, f"{who} is not an active registered identity; `bamboo keys list` shows the "
                "registry")
    verdict(as_json, True, body, f"revoked {who}, signed by {signer.identity}")


# --------------------------------------------------------------------------------- sign
def _signed_json(session: str, name: Message, request, identity: str | None, ttl: float) -> None:
    from bamboo.investigation import client as inv

    settings = get_settings()
    who = _identity(identity)
    if ttl > settings.max_signature_ttl_s:  # the workflow refuses it
        fail(f"--ttl {ttl:g} is over this deployment's longest signature lifetime ({settings.max_signature_ttl_s} s, "
             "BAMBOO_MAX_SIGNATURE_TTL_S); sign for less")
    try:
        speaker = inv.Speaker(who, KeyStore(settings.resolved_keys_dir()).load(who), ttl,
                              deployment=settings.resolved_deployment())
    except SigningKeyError as exc:
        fail(str(exc))
        return
    # ASCII JSON: the request quotes what a requester typed, so a C1 control or bidi override is a \u escape here.
    signed = speaker.sign(name, session, request)
    print(json.dumps(signed.model_dump(mode="json", exclude_none=True), ensure_ascii=True))


@sign_app.command("decide")
def sign_decide(
    session: str = typer.Argument(..., help="session id"),
    code_hash: str = typer.Argument(..., help="the full code hash, or its first 32 characters or more for the "
                                               "pending one (looked up)"),
    decision: str = typer.Argument(..., help="y (run once), a (auto-run), k (always ask), n (reject)"),
    turn: int | None = typer.Option(None, "--turn", help="the turn answered (with a full hash and --review, nothing "
                                                         "is looked up)"),
    review: str | None = typer.Option(None, "--review", help="the key of the review you read (the pending view's "
                                                             "`review`; at least its first 32 characters when looked "
                                                             "up): needed to run the code, since the same code can be "
                                                             "reviewed again with other procedures behind it"),
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
    try:  # a prefix signs whatever is pending under it: long enough that no other code can be made to share it
        full = inv.checked_prefix(code_hash)
    except inv.InvestigationError as exc:
        fail(str(exc))
        return
    if kind.runs_code and review is None:
        fail("name the review you read: --review KEY, as the pending view or `bamboo approvals` prints it (the code "
             "hash alone does not say which review of that code you read)")
    view = None
    # The answer names the review it was given to, and auto-run the grants it leaves: looked up unless given.
    if turn is None or len(full) != 64 or review is None or len(review) != 64 or kind is DecisionKind.AUTO_RUN:
        async def lookup():
            view = await inv.pending(await connect(get_settings()), session)
            if view is None or not view.code_hash.startswith(full):
                return None
            return view

        view = run(lookup())
        if view is None:
            fail(f"session {session} has no pending review with hash {code_hash}; `bamboo approvals` lists them")
            return
        if review is not None:
            try:
                inv.matched_review(view, session, inv.checked_prefix(review, "review key"))
            except inv.InvestigationError as exc:
                fail(str(exc))
                return
        turn, full, review = view.turn, view.code_hash, view.review
    try:
        request = OperatorDecision(turn=turn, code_hash=full, kind=kind, approver=_identity(identity),
                                   grants=inv.grants_answered(view, kind), review=review or "")
    except ValidationError:
        fail(f"--review {review!r} is not a review digest (64 lower-case hex characters); copy it from the view")
        return
    _signed_json(session, Message.DECIDE, request, identity, ttl)


@sign_app.command("message")
def sign_message(
    session: str = typer.Argument(...),
    text: str = typer.Argument(..., help="what you ask"),
    tool: bool = typer.Option(False, "--tool", help="a tool turn (skip the intent classifier)"),
    fresh_code: bool = typer.Option(False, "--fresh-code", help="newly written code, not a stored procedure"),
    identity: str | None = typer.Option(None, "--as"),
    ttl: float = typer.Option(DEFAULT_TTL_S, "--ttl", min=1),
) -> None:
    """Print a signed message, for `temporal workflow signal --name message --input ...`."""
    from bamboo.investigation.contract import OperatorMessage

    message = OperatorMessage(text=text, author=_identity(identity), force_tool=tool or fresh_code,
                              fresh_code=fresh_code)
    _signed_json(session, Message.MESSAGE, message, identity, ttl)


@sign_app.command("revoke")
def sign_revoke(
    session: str = typer.Argument(...),
    target: str = typer.Argument(..., help="a code hash prefix, a proc__ name, or all"),
    identity: str | None = typer.Option(None, "--as"),
    ttl: float = typer.Option(DEFAULT_TTL_S, "--ttl", min=1),
) -> None:
    """Print a signed revoke request."""
    from bamboo.investigation.contract import RevokeRequest

    _signed_json(session, Message.REVOKE, RevokeRequest(target=target, actor=_identity(identity)), identity, ttl)
