"""The ``execute_code`` activity: run generated code in the sandbox with a run-scoped tool bridge.

Thin: unpack the input, call ``bamboo.sandbox.CodeExecutor``, return its report. While the child runs
the activity heartbeats; when Temporal cancels the activity the child is killed before the
cancellation propagates. A retry of a run whose allow-set includes a state-changing tool is refused
(non-retryable): its first attempt may already have changed something, and that must be surfaced to
an operator, never silently repeated. A run the degraded sandbox refuses (unattended, or with a
state-changing tool) fails non-retryably too: retrying cannot make the sandbox stronger.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from typing import Literal

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from bamboo.audit import AuditSink, BlobSink
from bamboo.settings import Settings
from bamboo.sandbox.models import BridgeLimits, SandboxRunResult
from bamboo.sandbox.errors import SandboxRefused, SandboxUnavailable
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolCaller, ToolSpec

EXECUTE_CODE = "execute_code"
SANDBOX_UNAVAILABLE = "SandboxUnavailable"
RETRY_REFUSED = "SandboxRetryRefused"
SANDBOX_REFUSED = "SandboxRefused"
DEFAULT_HEARTBEAT_S = 1.0


class ExecuteCodeInput(BaseModel):
    run_id: str = Field(description="unique per execution; keys the audit rows")
    code: str = Field(description="body of an async function; may call the bridged tools")
    allowed_tools: list[str] = Field(default_factory=list, description="the allow-set decided by the trust policy")
    actor: str = "sandbox"
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_calls: int = Field(default=50, ge=0)
    call_timeout_s: float = Field(default=30.0, gt=0)
    phase: Literal["automatic", "interactive"] = Field(
        default="automatic", description="automatic = nobody approved this code (the safe reading when unsaid)")


class ExecuteCodeOutput(SandboxRunResult):
    """The run report: capped, scrubbed output for the model; call log and blob reference for the operator."""


class SandboxActivities:
    def __init__(
        self,
        *,
        runner: SandboxRunner,
        caller: ToolCaller,
        audit: AuditSink,
        blobs: BlobSink,
        specs: Sequence[ToolSpec] | None = None,
    ) -> None:
        """``specs=None`` reads the caller's live catalogue per run (tools added later are seen)."""
        self.executor = CodeExecutor(runner=runner, caller=caller, specs=specs, audit=audit, blobs=blobs)

    @activity.defn(name=EXECUTE_CODE)
    async def execute_code(self, inp: ExecuteCodeInput) -> ExecuteCodeOutput:
        allowed = frozenset(inp.allowed_tools)
        self._refuse_unsafe_retry(inp, allowed)
        run = asyncio.create_task(
            self.executor.execute(
                run_id=inp.run_id,
                code=inp.code,
                allowed_tools=allowed,
                timeout_s=inp.timeout_s,
                actor=inp.actor,
                bridge_limits=BridgeLimits(max_calls=inp.max_calls, call_timeout_s=inp.call_timeout_s),
                phase=inp.phase,
            )
        )
        started = time.monotonic()
        interval = _heartbeat_interval()
        try:
            while not run.done():
                activity.heartbeat({"run_id": inp.run_id, "elapsed_s": round(time.monotonic() - started, 1)})
                await asyncio.wait({run}, timeout=interval)
            result = run.result()
        except asyncio.CancelledError:
            run.cancel()
            try:
                await run  # the runner kills the child on cancellation
            except (asyncio.CancelledError, Exception):
                pass
            raise
        except SandboxRefused as exc:
            raise ApplicationError(str(exc), type=SANDBOX_REFUSED, non_retryable=True) from exc
        except SandboxUnavailable as exc:
            raise ApplicationError(str(exc), type=SANDBOX_UNAVAILABLE) from exc
        return ExecuteCodeOutput.model_validate(result.model_dump())

    def _refuse_unsafe_retry(self, inp: ExecuteCodeInput, allowed: frozenset[str]) -> None:
        if activity.info().attempt <= 1:
            return
        mutating = sorted(s.name for s in self.executor.current_specs() if s.name in allowed and not s.read_only)
        if mutating:
            raise ApplicationError(
                f"run {inp.run_id} may already have called state-changing tools ({', '.join(mutating)}); "
                "it is not retried automatically — ask an operator to check and re-run it",
                type=RETRY_REFUSED,
                non_retryable=True,
            )


def runner_from_settings(settings: Settings) -> SandboxRunner:
    """The worker's sandbox as configured; raises SandboxUnavailable (one line saying what to fix) when
    no sandbox of the configured strength can start here."""
    return SandboxRunner(
        isolation=settings.sandbox_isolation, pool_size=settings.sandbox_pool_size, seccomp=settings.sandbox_seccomp,
        uid_first=settings.sandbox_uid_first, uid_count=settings.sandbox_uid_count,
    )


def _heartbeat_interval() -> float:
    timeout = activity.info().heartbeat_timeout
    if timeout is None:
        return DEFAULT_HEARTBEAT_S
    return max(0.1, min(DEFAULT_HEARTBEAT_S, timeout.total_seconds() / 3))
