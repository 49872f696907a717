"""The remote executor's contract: its activity, its input and output, and its task queues.

An executor serves exactly one ``(environment, channel)`` and polls the task queue ``exec.<environment>.
<channel>``; a caller routes a command there by naming the queue, and the executor on it asserts that the
envelope was signed for that very environment and channel, so a misrouted call is refused, not run.

A command is never retried by Temporal: a retry after a timeout could run a write twice. The envelope's
nonce makes a second attempt a refused replay anyway; ``EXEC_RETRY`` says so up front.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.common import RetryPolicy

from bamboo.contract import activity_stub
from policy.envelopes import NAME_PATTERN, Channel, DecisionEnvelope

QUEUE_PREFIX = "exec"
EXEC_RETRY = RetryPolicy(maximum_attempts=1)
EXEC_TIMEOUT = timedelta(minutes=5)
# No executor polling the queue is an answer too: the caller hears it instead of waiting for ever (and an
# envelope that waited longer than its expiry would be refused anyway).
EXEC_SCHEDULE_TIMEOUT = timedelta(minutes=2)
_NAME = re.compile(NAME_PATTERN)


class ExecutorAddressError(ValueError):
    """An environment or channel name that cannot name a task queue."""


def executor_queue(environment: str, channel: str) -> str:
    """``exec.<environment>.<channel>``: the one task queue the executor for that pair polls."""
    if not _NAME.match(environment):
        raise ExecutorAddressError(f"environment {environment!r} is not a valid name: use lower-case letters, digits "
                                   "and '-', starting with a letter (e.g. staging, prod)")
    if channel not in ("ro", "rw"):
        raise ExecutorAddressError(f"channel {channel!r} is not ro or rw")
    return f"{QUEUE_PREFIX}.{environment}.{channel}"


def exec_options(environment: str, channel: str, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``execute_activity(run_command, ...)`` routed to that executor."""
    values: dict[str, Any] = {"task_queue": executor_queue(environment, channel),
                              "start_to_close_timeout": EXEC_TIMEOUT,
                              "schedule_to_start_timeout": EXEC_SCHEDULE_TIMEOUT, "retry_policy": EXEC_RETRY}
    values.update(overrides)
    return values


class ExecRequest(BaseModel):
    """A command tool call: the tool, the argv as requested, and the envelope that authorises it."""

    model_config = ConfigDict(frozen=True)

    tool: str
    argv: list[str] = Field(max_length=256)
    envelope: DecisionEnvelope


# The workflow that carries a call to its executor (workflows/exec_command.py); clients name it, never import it.
EXEC_WORKFLOW = "ExecCommand"


class ExecCall(BaseModel):
    """ExecCommand's input: where to route the request, and the request."""

    environment: str
    channel: Channel
    request: "ExecRequest"


class StepOutcome(BaseModel):
    """One subprocess run (the command, or its dry run), output already scrubbed."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    duration_s: float


class ExecResult(BaseModel):
    environment: str
    channel: Channel
    tool: str
    rule: str
    access: str
    targets: list[str]
    outcome: StepOutcome
    dry_run: StepOutcome | None = None
    grant_id: str | None = None


class ExecRefusalType:
    """``ApplicationError.type`` of each refusal (non-retryable): ``envelope.<reason>``, ``policy.denied``,
    ``phase.automatic_write``, ``gate.<gate name>``, ``credential.not_held``, ``audit.not_run``,
    ``audit.ran_unrecorded``."""

    ENVELOPE = "envelope"
    POLICY = "policy.denied"
    PHASE = "phase.automatic_write"
    GATE = "gate"
    CREDENTIAL = "credential.not_held"
    # The row saying a command is about to run could not be written: it was not run.
    UNRECORDED = "audit.not_run"
    # The command ran, and the row saying how could not be written: the caller must not read this as "failed".
    RAN_UNRECORDED = "audit.ran_unrecorded"


@activity_stub("exec.run_command")
async def run_command(request: ExecRequest) -> ExecResult:  # type: ignore[empty-body]  # contract stub: the worker registers the body
    """Verify the envelope, evaluate the command, pass the write gates, run it once, scrubbed."""
    ...
