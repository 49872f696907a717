"""Running generated code from a workflow's automatic steps: one way to call `execute_code` and one view
of its result. Deterministic helpers only; the activity does the running (on the sandbox queue)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.sandbox import contract as sandbox
    from bamboo.sandbox.contract import ExecuteCodeInput, SandboxRunResult

# Automatic steps time out sooner than an approved turn and are retried once: nobody waits on them.
AUTOMATIC_STEP = sandbox.SANDBOX_CALL.but(start_to_close=timedelta(minutes=3), retry=RetryPolicy(maximum_attempts=2))
AUTOMATIC_STEP_TIMEOUT_S = 60.0


def findings(report: SandboxRunResult) -> dict[str, Any]:
    """What the model may see of a sandbox run: its scrubbed, capped output and the call log."""
    return {
        "status": report.status, "error": report.error, "return_value": report.return_value,
        "stdout": report.stdout.preview,
        "tool_calls": [{"tool": c.tool, "outcome": c.outcome, "reason": c.reason} for c in report.calls],
    }


async def execute_code(label: str, code: str, allowed: list[str], actor: str, wait_s: float) -> SandboxRunResult:
    """Run `code` with exactly `allowed` as its allow-set; raises ActivityError when it cannot run."""
    info = workflow.info()
    run = ExecuteCodeInput(run_id=f"{info.workflow_id}:{info.run_id}:{label}", code=code, allowed_tools=allowed,
                           actor=actor, timeout_s=AUTOMATIC_STEP_TIMEOUT_S, phase="automatic")
    return await workflow.execute_activity(
        sandbox.execute_code, run, **AUTOMATIC_STEP.options(schedule_to_start_timeout=timedelta(seconds=wait_s)))
