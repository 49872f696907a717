"""`bamboo exec`: run a command tool on a remote executor, approve one, grant capacity for production writes.

    bamboo exec run --environment staging --channel ro TOOL -- ARGV...        a read, signed with your key
    bamboo exec approve --run RUN --requester alice --environment prod --channel rw --as bob TOOL -- ARGV... > approval.json
    bamboo exec grant --environment prod --tool TOOL --rule RULE --target T --admin ADMIN
    bamboo exec run --environment prod --channel rw --run RUN --approval approval.json TOOL -- ARGV...
    bamboo exec revoke GRANT --admin ADMIN

The CLI evaluates the command with the deployment's command-tools file (``BAMBOO_COMMAND_TOOLS_FILE``) exactly
as the executor will, shows the normalised argv, signs the decision envelope with the caller's key
(``BAMBOO_KEYS_DIR``; the executor lists it as ``person IDENTITY KEY`` in its verification keys) as that
person's own request in phase ``operator``, and routes the call to ``exec.<environment>.<channel>`` through
the ``ExecCommand`` workflow. An approver evaluates the command themselves before signing, so what they
approve is what they saw. A capability grant and its revocation are signed by an administrator whose key
the deployment pins (``--admin``; ``BAMBOO_ADMIN_KEYS_FILE``): executors ignore any other grant row.
"""

from __future__ import annotations

import json
import shlex
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import typer

from bamboo.cli.common import console, fail, run, verdict
from bamboo.executors.contract import ExecResult
from bamboo.frontends.inert_text import inert_rich, inert_terminal
from bamboo.settings import Settings, get_settings
from policy.identity import IdentityError, canonical_identity

exec_app = typer.Typer(help="Command tools on remote executors: run, approve, grant.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(exec_app, name="exec")


def _policy(settings: Settings):
    from bamboo.commands.config import CommandConfigError, configured_command_tools

    try:
        config = configured_command_tools(settings)
    except CommandConfigError as exc:
        fail(str(exc))
    if config is None:
        fail("set BAMBOO_COMMAND_TOOLS_FILE to the deployment's command-tools file")
    return config.policy


def _key(settings: Settings, identity: str | None):
    from bamboo.approvals.keys import KeyStore, SigningKeyError
    from bamboo.cli.keys_cmd import _identity

    try:
        return KeyStore(settings.resolved_keys_dir()).load(_identity(identity))
    except SigningKeyError as exc:
        fail(str(exc))


def _claims(settings: Settings, key, tool: str, argv: list[str], environment: str, channel: str, run_id: str,
            requester: str | None = None):
    """The unsigned claims for ``tool argv`` and the command the policy normalised it to (one evaluation)."""
    from bamboo.executors import signer
    from policy.commands import CommandDenied, evaluate

    if channel not in ("ro", "rw"):
        fail(f"channel {channel!r} is not ro or rw")
    side: Literal["ro", "rw"] = "rw" if channel == "rw" else "ro"
    try:
        match = evaluate(_policy(settings), tool, argv, environment=environment, channel=side)
        return signer.claims_of(match, run_id=run_id, tool_call_id=f"cli-{uuid.uuid4().hex[:12]}",
                                deployment=settings.resolved_deployment(), environment=environment, channel=side,
                                phase="operator", requester=requester or key.identity, key=key), match
    except CommandDenied as exc:
        fail(f"command refused: {exc.reason}")
    except ValueError as exc:
        fail(str(exc))


ENVIRONMENT = typer.Option(..., "--environment", help="e.g. staging or prod")
CHANNEL = typer.Option(..., "--channel", help="ro or rw")
AS = typer.Option(None, "--as", help="whose key signs (default: $BAMBOO_OPERATOR or your login)")
ADMIN = typer.Option(None, "--admin", help="the pinned administrator who signs (their private key in your keys "
                                           "directory; default on the embedded stack: its demo administrator)")


def _admin(settings: Settings, identity: str | None, as_json: bool = False, body: dict[str, Any] | None = None):
    """The signing administrator's key and the pinned keys it was checked against; a key that is not pinned
    is the command's refused verdict (one line, or JSON with ``as_json``)."""
    from bamboo.approvals.admin import PinnedAdmins, admin_key
    from policy.trust_root import TrustRootError

    try:
        return admin_key(settings, identity), PinnedAdmins.of(settings).root()
    except TrustRootError as exc:
        verdict(as_json, False, body or {}, str(exc))
        raise


@exec_app.command("run")
def exec_run(
    tool: str = typer.Argument(..., help="the declared command tool"),
    argv: list[str] = typer.Argument(..., help="the command, program name first (after --)"),
    environment: str = ENVIRONMENT,
    channel: str = CHANNEL,
    run_id: str | None = typer.Option(None, "--run", help="the run this call belongs to (an approval names it)"),
    approval: Path | None = typer.Option(None, "--approval", help="an approver's `bamboo exec approve` output"),
    identity: str | None = AS,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Sign an envelope for TOOL ARGV and run it on the executor of ENVIRONMENT.CHANNEL."""
    from bamboo.executors import signer
    from bamboo.executors.client import ExecRefused, execute
    from bamboo.temporal_client import connect
    from policy.decisions import OperatorDecision

    settings = get_settings()
    key = _key(settings, identity)
    claims, _ = _claims(settings, key, tool, argv, environment, channel, run_id or f"cli-run-{uuid.uuid4().hex[:12]}")
    if approval is not None:
        try:
            decision = OperatorDecision.model_validate_json(approval.read_text())
        except (OSError, ValueError) as exc:
            fail(f"{approval} is not an approval written by `bamboo exec approve`: {str(exc).splitlines()[0]}")
        claims = claims.model_copy(update={"approval": decision})
    envelope = signer.sign(claims, key)

    async def go():
        return await execute(await connect(settings), tool=tool, argv=argv, envelope=envelope)

    try:
        result = run(go())
    except ExecRefused as refused:
        fail(refused.message)
        return
    if as_json:  # ASCII JSON: the command's output is the server's text, its C1 and bidi characters as \u escapes
        print(json.dumps(result.model_dump(mode="json"), ensure_ascii=True))
        return
    show_result(result)
    if result.outcome.exit_code != 0:
        raise typer.Exit(1)




def show_result(result: ExecResult) -> None:
    """A command's output as a person reads it: what the server or tool printed is not trusted, so every
    control, escape and invisible character is spelled out (``--json`` gives the exact text, JSON-escaped)."""
    console.print(f"[bold]{result.tool}[/] rule {result.rule} on exec.{result.environment}.{result.channel}: "
                  f"exit {result.outcome.exit_code}", highlight=False)
    if result.outcome.stdout:
        console.print(inert_rich(result.outcome.stdout.rstrip("\n")), highlight=False, soft_wrap=True)
    if result.outcome.stderr:
        console.print(inert_rich(result.outcome.stderr.rstrip("\n"), "dim"), highlight=False, soft_wrap=True)

@exec_app.command("approve")
def exec_approve(
    tool: str = typer.Argument(..., help="the declared command tool"),
    argv: list[str] = typer.Argument(..., help="the command as the requester will run it (after --)"),
    environment: str = ENVIRONMENT,
    channel: str = CHANNEL,
    run_id: str = typer.Option(..., "--run", help="the requester's run id (`bamboo exec run --run`)"),
    requester: str = typer.Option(..., "--requester", help="who asks to run it: the approval counts for their "
                                                           "request only"),
    identity: str | None = AS,
) -> None:
    """Sign your approval of exactly this command in this run, asked for by --requester; prints the approval JSON
    for `exec run --approval`."""
    import sys

    from bamboo.executors import signer

    settings = get_settings()
    key = _key(settings, identity)
    try:
        asker = canonical_identity(requester)
    except IdentityError as exc:
        fail(f"--requester {requester!r}: {exc}")
    claims, match = _claims(settings, key, tool, argv, environment, channel, run_id, requester=asker)
    decision = signer.approve(claims, key, deployment=settings.resolved_deployment())
    # What the signature covers is the command as the executor will run it (the policy's normal form, with the
    # options it places itself), not as typed: shown whole, so the approver reads what runs.
    runs = match.argv
    print(f"approving on exec.{environment}.{channel} for {inert_terminal(asker, one_line=True)}: "
          f"{json.dumps(claims.targets and list(claims.targets))} digest {claims.argv_digest[:16]}\n"
          f"the executor runs: {inert_terminal(shlex.join(runs), one_line=True)}", file=sys.stderr)
    print(json.dumps(decision.model_dump(mode="json"), ensure_ascii=True))


@exec_app.command("grant")
def exec_grant(
    environment: str = ENVIRONMENT,
    tool: str = typer.Option(..., "--tool"),
    rule: str = typer.Option(..., "--rule", help="the write rule (command shape) the grant is for"),
    target: list[str] = typer.Option(..., "--target", help="a canonical target; repeat for the exact set"),
    executions: int = typer.Option(1, "--executions", min=1, help="how many runs in total"),
    repetitions: int = typer.Option(1, "--repetitions", min=1, help="how often the same command may repeat"),
    ttl_s: int = typer.Option(3600, "--ttl", min=60, help="seconds until the grant expires"),
    admin: str | None = ADMIN,
    as_json: bool = typer.Option(False, "--json", help="the verdict as JSON (accepted, or refused and why); "
                                                       "the exit status is the same"),
) -> None:
    """Grant capacity for production writes on an exact target set, signed by a pinned administrator (audited)."""
    from bamboo.audit import AuditEvent
    from bamboo.cli.store_access import opened_store
    from bamboo.executors import signer
    from bamboo.store.executor_state import ExecutorState, GrantRefused

    settings = get_settings()
    if repetitions > executions:
        fail("--repetitions cannot exceed --executions")
    asked = {"environment": environment, "tool": tool, "rule": rule, "targets": target}
    key, root = _admin(settings, admin, as_json, asked)
    try:
        signed = signer.sign_grant(key, environment=environment, tool=tool, rule=rule, targets=target,
                                   max_executions=executions, max_repetitions=repetitions,
                                   expires_at=datetime.now(timezone.utc) + timedelta(seconds=ttl_s),
                                   deployment=root.deployment)
    except ValueError as exc:
        fail(f"the grant is not valid: {str(exc).splitlines()[0]}")
        return

    async def go():
        async with opened_store(settings) as store:
            grant = await ExecutorState(store.pool).record_grant(signed, root)
            await store.audit.append(AuditEvent(kind="capability_granted", actor=key.identity, body={
                **grant.model_dump(mode="json"), "statement_id": signed.statement.statement_id,
                "key_id": signed.statement.key_id}))
            return grant

    try:
        grant = run(go())
    except GrantRefused as exc:
        verdict(as_json, False, asked, str(exc))
        return
    verdict(as_json, True, {**grant.model_dump(mode="json"), "signed_by": key.identity},
            f"grant {grant.grant_id}: {tool}/{rule} on {list(grant.targets)} in {environment}, "
            f"{executions} execution(s), {repetitions} repetition(s), until {grant.expires_at.isoformat()}, "
            f"signed by {key.identity}")


@exec_app.command("revoke")
def exec_revoke(grant_id: str = typer.Argument(..., help="the grant's id, as `bamboo exec grant` printed it"),
                admin: str | None = ADMIN,
                as_json: bool = typer.Option(False, "--json", help="the verdict as JSON (accepted, or refused and "
                                                                   "why); the exit status is the same")) -> None:
    """Revoke a capability grant now with a signed revocation (audited); writes under it are refused from then on."""
    from bamboo.audit import AuditEvent
    from bamboo.cli.store_access import opened_store
    from bamboo.executors import signer
    from bamboo.store.executor_state import ExecutorState, GrantRefused

    settings = get_settings()
    key, root = _admin(settings, admin, as_json, {"grant_id": grant_id})
    signed = signer.sign_revocation(key, grant_id, deployment=root.deployment)

    async def go() -> bool:
        async with opened_store(settings) as store:
            revoked = await ExecutorState(store.pool).record_revocation(signed, root)
            if revoked:
                await store.audit.append(AuditEvent(kind="capability_revoked", actor=key.identity, body={
                    "grant_id": grant_id, "statement_id": signed.statement.statement_id,
                    "key_id": signed.statement.key_id}))
            return revoked

    body = {"grant_id": grant_id, "revoked_by": key.identity}
    try:
        revoked = run(go())
    except GrantRefused as exc:
        verdict(as_json, False, body, str(exc))
        return
    if not revoked:
        verdict(as_json, False, body, f"no active grant {grant_id} signed by a pinned administrator; list the audit "
                "log's capability_granted rows for the ids")
    verdict(as_json, True, body, f"grant {grant_id} revoked by {key.identity}")
