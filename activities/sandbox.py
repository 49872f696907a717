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

from temporalio import activity
from temporalio.exceptions import ApplicationError

from bamboo.audit import AuditSink, BlobSink
from bamboo.contract import implements
from bamboo.sandbox import contract
from bamboo.sandbox.contract import RETRY_REFUSED, SANDBOX_REFUSED, SANDBOX_UNAVAILABLE, ExecuteCodeInput, SandboxRunResult
from bamboo.sandbox.models import BridgeLimits
from bamboo.sandbox.errors import SandboxRefused, SandboxUnavailable
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolCaller, ToolSpec

DEFAULT_HEARTBEAT_S = 1.0


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

    @implements(contract.execute_code)
    async def execute_code(self, inp: ExecuteCodeInput) -> SandboxRunResult:
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
        return result

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


def _heartbeat_interval() -> float:
    timeout = activity.info().heartbeat_timeout
    if timeout is None:
        return DEFAULT_HEARTBEAT_S
    return max(0.1, min(DEFAULT_HEARTBEAT_S, timeout.total_seconds() / 3))
