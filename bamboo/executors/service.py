"""The executor itself: verify, evaluate, gate, run once, scrub, audit.

Order matters, and each step refuses with an ``ExecRefusal`` whose type names it (the activity,
``activities/executor.py``, turns it into a non-retryable ``ApplicationError`` of that type):

1. the envelope's signature, what its key may claim (a person's key: only its own requests, in phase
   ``operator``), freshness, environment and channel (``envelope.<reason>``), then its nonces are recorded so
   the same envelope or approval is never accepted twice (``envelope.replayed``);
2. the command policy evaluates the argv (``policy.denied``), and the envelope's tool, executable, argv
   digest, targets, rule, credential family and declared secrets are compared with what the executor itself
   derived (``envelope.<reason>``);
3. a state-changing command in an automatic phase is refused (``phase.automatic_write``);
4. in a gated environment (production), the seven write gates (``gate.<name>``), the dry run, and the
   atomic spending of the grant's capacity; grants and approvers count only when an administrator whose key
   this executor pins (``admins``, read from its own settings) signed them;
5. the clean environment with the one credential family, the run, and the scrubbed outcome.

Every refusal and every run is an audit row, so "what did executors refuse and run" is answered from the
audit log alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, NoReturn

from bamboo.approvals.registry import ApproverRegistry, TrustRootSource
from bamboo.audit import AuditEvent
from bamboo.commands.credentials import clean_environment
from bamboo.commands.runner import run_command as run_subprocess
from bamboo.executors import contract
from bamboo.executors.config import ExecutorConfig
from bamboo.store.audit_log import PostgresAuditLog
from bamboo.store.executor_state import ExecutorState, GrantExhausted
from policy.approvers import DeploymentPolicy
from policy.commands import CommandDenied, CommandMatch, argv_digest, evaluate
from policy.envelopes import EnvelopeClaims, EnvelopeRefusal, EnvelopeVerdict, verify_envelope, verify_request
from policy.trust_root import TrustRootError
from policy.write_gates import (Gate, GateRefusal, WriteFacts, approval_refusal, gated, judge_pure_gates,
                                phase_refusal)


class ExecRefusal(Exception):
    """A refused call; ``type`` names the check (``envelope.replayed``, ``gate.approval``, ...)."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


class CommandExecutor:
    """One executor: ``config`` is fixed for the process's life; ``run`` serves one call."""

    def __init__(self, config: ExecutorConfig, state: ExecutorState, audit: PostgresAuditLog,
                 registry: ApproverRegistry, admins: TrustRootSource, *,
                 source: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.state = state
        self.audit = audit
        self.registry = registry  # built on the same ``admins``
        self.admins = admins
        self.source = dict(os.environ if source is None else source)

    async def run(self, request: contract.ExecRequest) -> contract.ExecResult:
        cfg = self.config
        claims = request.envelope.claims
        now = datetime.now(timezone.utc)
        try:
            deployment = self.admins.root().deployment  # the name the pinned trust root gives this deployment
        except TrustRootError as exc:
            await self._refuse(request, f"{contract.ExecRefusalType.ENVELOPE}.{EnvelopeRefusal.WRONG_DEPLOYMENT.value}",
                               f"refused at {Gate.EXECUTOR_SIGNATURE.label}: this executor cannot read the keys it "
                               f"pins, so it cannot tell which deployment it serves: {exc}")
        verdict = verify_envelope(request.envelope, keys=cfg.verification_keys, deployment=deployment,
                                  environment=cfg.environment, channel=cfg.channel, now=now,
                                  max_ttl_s=cfg.max_envelope_ttl_s)
        if not verdict.ok:
            assert verdict.refusal is not None  # a failed verdict names its refusal
            await self._refuse(request, f"{contract.ExecRefusalType.ENVELOPE}.{verdict.refusal.value}",
                               f"refused at {Gate.EXECUTOR_SIGNATURE.label}: {verdict.detail}")
        if await self.state.record_nonces(claims, [("envelope", claims.nonce)]) is not None:
            await self._refuse(request, f"{contract.ExecRefusalType.ENVELOPE}.replayed",
                               f"refused at {Gate.EXECUTOR_SIGNATURE.label}: this envelope's nonce was already used; "
                               "sign a new envelope for every call")
        gated_env = gated(cfg.environment, cfg.gated_environments)
        try:
            # Symlinks resolve on this host's file system, the one the command will run on.
            match = evaluate(cfg.policy, request.tool, request.argv, environment=cfg.environment, channel=cfg.channel,
                             resolve_path=os.path.realpath)
        except CommandDenied as denied:
            if gated_env and cfg.channel == "rw":
                refusal = GateRefusal(gate=Gate.WRITE_RULE, detail=f"no explicit write rule allows it ({denied.reason})")
                await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{Gate.WRITE_RULE.value}", refusal.message)
            await self._refuse(request, contract.ExecRefusalType.POLICY, f"command refused: {denied.reason}")
        checked = verify_request(claims, tool=match.tool, executable=match.executable,
                                 argv_digest=argv_digest(match.argv), targets=match.targets, rule=match.rule,
                                 credential=match.credential, secrets=match.secrets)
        if not checked.ok:
            assert checked.refusal is not None  # a failed check names its refusal
            await self._refuse(request, f"{contract.ExecRefusalType.ENVELOPE}.{checked.refusal.value}",
                               f"refused at {Gate.EXECUTOR_SIGNATURE.label}: {checked.detail}", match)
        phase = phase_refusal(claims, match.access)
        if phase is not None:
            await self._refuse(request, contract.ExecRefusalType.PHASE, phase, match)
        grant_id = None
        dry_run = None
        if gated_env and (cfg.channel == "rw" or match.access == "write"):
            grant_id, dry_run = await self._pass_write_gates(request, match, verdict, now)
        elif match.credential is not None and match.credential != cfg.held_credential:
            await self._refuse(request, contract.ExecRefusalType.CREDENTIAL,
                               f"rule {match.rule!r} needs credential {match.credential!r}, which this executor does "
                               f"not hold; route the call to the executor that holds it", match)
        outcome = await self._run(request, match, match.argv, grant_id=grant_id)
        result = contract.ExecResult(environment=cfg.environment, channel=cfg.channel, tool=match.tool, rule=match.rule,
                                     access=match.access, targets=list(match.targets), outcome=outcome,
                                     dry_run=dry_run, grant_id=grant_id)
        try:
            await self.audit.append(AuditEvent(kind="executor_ran", actor=cfg.actor, run_id=claims.run_id, body={
                **self._about(request), "rule": match.rule, "access": match.access, "argv": match.argv,
                "targets": list(match.targets), "exit_code": outcome.exit_code, "duration_s": outcome.duration_s,
                "grant_id": grant_id, "dry_run_exit_code": dry_run.exit_code if dry_run else None,
                "approver": claims.approval.approver if claims.approval else None,
            }))
        except Exception as exc:  # it ran: a generic failure here read as "failed", and a second kill followed
            raise ExecRefusal(contract.ExecRefusalType.RAN_UNRECORDED,
                              f"the command RAN (exit {outcome.exit_code}) but the row recording it could not be written "
                              f"({type(exc).__name__}); its executor_started row names it: do not run it again "
                              "before checking what it changed") from None
        return result

    async def _pass_write_gates(self, request: contract.ExecRequest, match: CommandMatch, verdict: EnvelopeVerdict,
                                now: datetime) -> tuple[str, contract.StepOutcome | None]:
        cfg, claims = self.config, request.envelope.claims
        digest = argv_digest(match.argv)
        try:
            root = self.admins.root()
        except TrustRootError as exc:
            refusal = GateRefusal(gate=Gate.CAPABILITY_GRANT, detail=f"this executor cannot read the administrators' "
                                                                    f"keys it pins, so no grant counts: {exc}")
            await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{Gate.CAPABILITY_GRANT.value}",
                               refusal.message, match)
        found = await self.state.grants_for(environment=cfg.environment, tool=match.tool, rule=match.rule,
                                            argv_digest=digest, root=root)
        policy = await self._deployment_policy()
        facts = WriteFacts(
            environment=cfg.environment, tool=match.tool, rule=match.rule, access=match.access,
            credential=match.credential, held_credential=cfg.held_credential,
            credential_values_present=self._held_credential_present(),
            targets=tuple(match.targets), argv_digest=digest, grants=found.grants, repetitions=found.repetitions,
            ignored_grants=found.ignored, approval_refusal=approval_refusal(claims, policy, now=now),
            envelope=verdict, envelope_channel=claims.channel, executor_channel=cfg.channel,
        )
        judged = judge_pure_gates(facts, now=now)
        if isinstance(judged, GateRefusal):
            await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{judged.gate.value}", judged.message, match)
        # The approval is used up only once it approved this request: recorded with the envelope, an approval
        # attached to anyone's envelope that failed its gates was spent without running anything.
        assert claims.approval is not None and claims.approval.auth is not None  # gate 6 passed: a signed approval
        if await self.state.record_nonces(claims, [("approval", claims.approval.auth.nonce)]) is not None:
            await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{Gate.APPROVAL.value}",
                               f"production write refused at {Gate.APPROVAL.label}: this signed approval was already "
                               "used; have the approver sign a new one", match)
        dry_run = None
        if match.dry_run_argv is not None:
            dry_run = await self._run(request, match, match.dry_run_argv)
            if dry_run.exit_code != 0:
                refusal = GateRefusal(gate=Gate.DRY_RUN, detail=f"the server-side dry run exited {dry_run.exit_code}: "
                                                                f"{' '.join((dry_run.stderr or dry_run.stdout)[:300].split())}")
                await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{Gate.DRY_RUN.value}", refusal.message,
                                   match)
        try:
            await self.state.consume(judged.grant, claims, root)
        except GrantExhausted as exc:
            refusal = GateRefusal(gate=Gate.GRANT_CAPACITY, detail=str(exc))
            await self._refuse(request, f"{contract.ExecRefusalType.GATE}.{Gate.GRANT_CAPACITY.value}",
                               refusal.message, match)
        return judged.grant.grant_id, dry_run

    async def _deployment_policy(self) -> DeploymentPolicy:
        return await self.registry.policy(self.config.approval_rules)

    def _held_credential_present(self) -> bool:
        """Whether every variable of the family this executor holds has a value in its own environment."""
        held = self.config.held_credential
        spec = self.config.credentials.get(held) if held else None
        return spec is not None and bool(spec.env) and all(self.source.get(name) for name in spec.env.values())

    async def _run(self, request: contract.ExecRequest, match: CommandMatch, argv: list[str],
                   grant_id: str | None = None) -> contract.StepOutcome:
        """Run ``argv`` once, after a row saying so is written: without one, nothing runs (a command that changed
        state and then lost its only row, to a database blip or a killed executor, left no trace of what ran)."""
        cfg = self.config
        step = match.model_copy(update={"argv": argv})
        try:
            await self.audit.append(AuditEvent(kind="executor_started", actor=cfg.actor,
                                               run_id=request.envelope.claims.run_id, body={
                **self._about(request), "rule": match.rule, "access": match.access, "argv": argv,
                "targets": list(match.targets), "grant_id": grant_id, "dry_run": argv != match.argv}))
        except Exception as exc:
            raise ExecRefusal(contract.ExecRefusalType.UNRECORDED,
                              f"not run: the row recording that it runs could not be written ({type(exc).__name__}); "
                              "nothing was changed, try again once the audit log is reachable") from None
        try:
            env = clean_environment(match, cfg.credentials, self.source)
            outcome = await run_subprocess(step, env, timeout_s=cfg.timeout_s, output_limit=cfg.output_limit)
        except CommandDenied as denied:  # a family unset here, a path that now leaves the root through a symlink
            await self._refuse(request, contract.ExecRefusalType.POLICY, f"command refused: {denied.reason}", match)
        return contract.StepOutcome(exit_code=outcome.exit_code, stdout=outcome.stdout, stderr=outcome.stderr,
                                    truncated=outcome.truncated, duration_s=outcome.duration_s)

    def _about(self, request: contract.ExecRequest) -> dict[str, Any]:
        claims: EnvelopeClaims = request.envelope.claims
        return {"tool": request.tool, "tool_call_id": claims.tool_call_id, "environment": claims.environment,
                "channel": claims.channel, "phase": claims.phase, "requester": claims.requester,
                "key_id": claims.key_id, "nonce": claims.nonce, "argv_digest_claimed": claims.argv_digest,
                "argv_digest_requested": argv_digest(list(request.argv))}

    async def _refuse(self, request: contract.ExecRequest, kind: str, message: str,
                      match: CommandMatch | None = None) -> NoReturn:
        body = {**self._about(request), "refusal": kind, "detail": message}
        if match is not None:
            body.update(rule=match.rule, targets=list(match.targets))
        await self.audit.append(AuditEvent(kind="executor_refused", actor=self.config.actor,
                                           run_id=request.envelope.claims.run_id, body=body))
        raise ExecRefusal(kind, message)
