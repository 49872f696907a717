"""Calling an executor from anywhere that holds a Temporal client: the CLI today, an investigation's
command-tool call next. The caller signs; this module only routes and reports.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from bamboo.contract import Queue
from bamboo.executors.contract import EXEC_WORKFLOW, ExecCall, ExecRequest, ExecResult
from policy.envelopes import DecisionEnvelope


class ExecRefused(RuntimeError):
    """The executor (or the route to it) refused the call; ``type`` names the check, e.g. ``gate.approval``."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


def refusal_of(exc: BaseException) -> ExecRefused:
    """The innermost typed ApplicationError of a failed ExecCommand, or the failure's own message."""
    cause: BaseException | None = exc
    innermost: BaseException = exc
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type:
            return ExecRefused(cause.type, cause.message)
        innermost = cause
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return ExecRefused("exec.failed", str(getattr(innermost, "message", "") or innermost))


async def execute(client: Client, *, tool: str, argv: list[str], envelope: DecisionEnvelope,
                  task_queue: str = Queue.MAIN.value) -> ExecResult:
    """Run ``tool argv`` under ``envelope`` on the executor the envelope names; ExecRefused when refused."""
    claims = envelope.claims
    call = ExecCall(environment=claims.environment, channel=claims.channel,
                    request=ExecRequest(tool=tool, argv=argv, envelope=envelope))
    try:
        return await client.execute_workflow(EXEC_WORKFLOW, call, id=f"exec-{claims.run_id}-{claims.tool_call_id}",
                                             task_queue=task_queue, result_type=ExecResult)
    except WorkflowFailureError as exc:
        raise refusal_of(exc) from None
