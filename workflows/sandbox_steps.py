"""Running generated code from a workflow: one way to call `execute_code` and one view of its result.

Deterministic helpers only; the activity does the running (on the sandbox queue).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows import names
from bamboo.contract import HEARTBEAT, Queue



def findings(report: dict) -> dict:
    """What the model may see of a sandbox run: its scrubbed, capped output and the call log."""
    return {
        "status": report.get("status"), "error": report.get("error"), "return_value": report.get("return_value"),
        "stdout": (report.get("stdout") or {}).get("preview", ""),
        "tool_calls": [{"tool": c.get("tool"), "outcome": c.get("outcome"), "reason": c.get("reason")}
                       for c in report.get("calls") or []],
    }


async def execute_code(label: str, code: str, allowed: list[str], actor: str, wait_s: float) -> dict:
    """Run `code` with exactly `allowed` as its allow-set; raises ActivityError when it cannot run."""
    info = workflow.info()
    run = {"run_id": f"{info.workflow_id}:{info.run_id}:{label}", "code": code, "allowed_tools": allowed,
           "actor": actor, "timeout_s": 60.0, "phase": "automatic"}
    return await workflow.execute_activity(
        names.EXECUTE_CODE, run, result_type=dict, task_queue=Queue.SANDBOX,
        schedule_to_start_timeout=timedelta(seconds=wait_s), start_to_close_timeout=timedelta(minutes=3),
        heartbeat_timeout=HEARTBEAT, retry_policy=RetryPolicy(maximum_attempts=2),
    )
