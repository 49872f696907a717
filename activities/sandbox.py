"""The ``execute_code`` activity: run generated code in the sandbox with a run-scoped tool bridge.

Thin: unpack the input, call ``bamboo.sandbox.CodeExecutor``, return its report. While the child runs
the activity heartbeats; when Temporal cancels the activity the child is killed before the
cancellation propagates. A retry of a run whose allow-set includes a state-changing tool is refused
(non-retryable): its first attempt may already have changed something, and that must be surfaced to
an operator, never silently repeated. A run the degraded sandbox refuses (unattended, or with a
state-changing tool) fails non-retryably too: retrying cannot make the sandbox stronger.

The audit rows the input carries (the decision that lets this code run, written by nobody yet) are written
first, in order and under their dedup keys, before the code starts: a run never precedes the record of what
authorised it, and a retried activity writes them once. If they cannot be written the code does not run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import with_heartbeats
from bamboo.audit import AuditEvent, AuditSink, BlobSink
from bamboo.contract import implements
from bamboo.sandbox import contract
from bamboo.sandbox.contract import (
    AUDIT_UNWRITTEN, RETRY_REFUSED, SANDBOX_REFUSED, SANDBOX_UNAVAILABLE, ExecuteCodeInput, SandboxRunResult,
)
from bamboo.sandbox.models import BridgeLimits
from bamboo.sandbox.errors import SandboxRefused, SandboxUnavailable
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.store.first_claims import UsedDecisions
from bamboo.tools.model import ToolCaller, ToolSpec

HEARTBEAT_S = 1.0


class SandboxActivities:
    def __init__(
        self,
        *,
        runner: SandboxRunner,
        caller: ToolCaller,
        audit: AuditSink,
        blobs: BlobSink,
        specs: Sequence[ToolSpec] | None = None,
        used_decisions: UsedDecisions | None = None,
    ) -> None:
        """``specs=None`` reads the caller's live catalogue per run (tools added later are seen).
        ``used_decisions``: where a person's decision is recorded as used before its code runs; without it, no
        run a decision authorises is started (the analysis and learning workers run only automatic steps)."""
        self.executor = CodeExecutor(runner=runner, caller=caller, specs=specs, audit=audit, blobs=blobs)
        self.used_decisions = used_decisions

    @implements(contract.execute_code)
    async def execute_code(self, inp: ExecuteCodeInput) -> SandboxRunResult:
        allowed = frozenset(inp.allowed_tools)
        self._refuse_unsafe_retry(inp, allowed)
        started = time.monotonic()
        try:
            # Cancelled by Temporal: the runner kills the child before the cancellation goes on.
            return await with_heartbeats(
                self._authorised_run(inp, allowed),
                every_s=HEARTBEAT_S,
                details=lambda: {"run_id": inp.run_id, "elapsed_s": round(time.monotonic() - started, 1)},
            )
        except SandboxRefused as exc:
            raise ApplicationError(str(exc), type=SANDBOX_REFUSED, non_retryable=True) from exc
        except SandboxUnavailable as exc:
            raise ApplicationError(str(exc), type=SANDBOX_UNAVAILABLE) from exc
        except _AuditUnwritten as exc:
            raise ApplicationError(str(exc), type=AUDIT_UNWRITTEN, non_retryable=True) from exc

    async def _authorised_run(self, inp: ExecuteCodeInput, allowed: frozenset[str]) -> SandboxRunResult:
        """The carried audit rows, then the run; both under the heartbeats (a store waiting out an outage
        keeps the activity alive)."""
        await self._use_decision(inp)
        try:
            for row in inp.audit:
                await self.executor.audit.append(
                    AuditEvent(kind=row.kind, actor=row.actor, run_id=row.run_id, body=row.body),
                    dedup_key=row.dedup_key)
        except Exception as exc:  # noqa: BLE001 — whatever the store raised, the code must not run unrecorded
            raise _AuditUnwritten(f"the audit rows that authorise run {inp.run_id} could not be written "
                                  f"({type(exc).__name__}: {str(exc)[:200]}); the code did not run") from exc
        return await self.executor.execute(
            run_id=inp.run_id,
            code=inp.code,
            allowed_tools=allowed,
            timeout_s=inp.timeout_s,
            actor=inp.actor,
            bridge_limits=BridgeLimits(max_calls=inp.max_calls, call_timeout_s=inp.call_timeout_s),
            phase=inp.phase,
            caller=self.caller_for(inp),
            read_only_tools=frozenset(inp.read_only_tools),
            tool_names=inp.tool_names or None,
        )

    def caller_for(self, inp: ExecuteCodeInput) -> ToolCaller | None:
        """The tool caller of this run, when it must differ from the executor's (None: the executor's)."""
        return None

    async def _use_decision(self, inp: ExecuteCodeInput) -> None:
        """A signed decision authorises one workflow run's code, ever: a reset run re-sent it with the signals
        after its reset point, and the session's own record of used nonces had been rolled back with it. A retry
        of this activity is the same run and goes on."""
        if inp.decision is None:
            return
        if self.used_decisions is None:
            raise SandboxRefused(f"run {inp.run_id} acts on a person's decision, and this worker cannot record a "
                                 "decision as used; run it on a worker with the store")
        run = activity.info().workflow_run_id or ""
        holder = await self.used_decisions.use(inp.decision.nonce, inp.decision.session_id, run)
        if holder != run:
            raise SandboxRefused(f"the decision that authorises run {inp.run_id} was used by another run of session "
                                 f"{inp.decision.session_id} ({holder}); a reset re-sends signals, not approvals: "
                                 "ask for a new approval")

    def _refuse_unsafe_retry(self, inp: ExecuteCodeInput, allowed: frozenset[str]) -> None:
        if activity.info().attempt <= 1:
            return
        # What the run's decision did not judge read-only, and what the catalogue says changes state now: a tool
        # missing from the listing at this moment (an MCP server reconnecting) must not make the retry look safe.
        # An automatic step's allow-set is read-only by construction (policy.phases.automatic_allow_set).
        judged = allowed if inp.phase == "automatic" else frozenset(inp.read_only_tools)
        live = {s.name for s in self.executor.current_specs() if s.name in allowed and not s.read_only}
        mutating = sorted((allowed - judged) | live)
        if mutating:
            raise ApplicationError(
                f"run {inp.run_id} may already have called state-changing tools ({', '.join(mutating)}); "
                "it is not retried automatically — ask an operator to check and re-run it",
                type=RETRY_REFUSED,
                non_retryable=True,
            )


class _AuditUnwritten(Exception):
    """The rows a run carries could not be written, so its code was not started."""
