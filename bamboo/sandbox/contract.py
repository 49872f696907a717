"""The sandbox's contract: the ``execute_code`` activity, what a run is asked and what it reports back.

One request model (``ExecuteCodeInput``) for every caller: the investigation's approved turns and the
automatic exploration steps of analysis and accumulation. Imported by workflows, the activity, the worker
and the tests alike; pure pydantic, nothing that does I/O (docs/architecture.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.common import RetryPolicy

from bamboo.contract import HEARTBEAT, ActivityOptions, Queue, activity_stub

Isolation = Literal["bwrap", "degraded"]
RunStatus = Literal["ok", "error", "timeout", "output_limit", "memory_limit", "disk_limit", "call_limit", "crashed"]
CallOutcome = Literal["allowed", "denied", "error"]
Phase = Literal["automatic", "interactive"]
MemoryGuardKind = Literal["cgroup", "watchdog"]

# ApplicationError types the activity raises; workflows tell "no sandbox worker here" from "refused".
SANDBOX_UNAVAILABLE = "SandboxUnavailable"
RETRY_REFUSED = "SandboxRetryRefused"
SANDBOX_REFUSED = "SandboxRefused"
AUDIT_UNWRITTEN = "SandboxAuditUnwritten"  # the rows that authorise a run could not be written: nothing ran


class AuditRow(BaseModel):
    """An audit row the run's caller had not written yet, above all the decision that lets this code run: the
    activity writes it before the code starts, under its dedup key, so a retried activity writes it once."""

    kind: str
    actor: str
    run_id: str | None = None
    body: dict[str, Any] = Field(default_factory=dict)
    dedup_key: str


class UsedDecision(BaseModel):
    """The signed decision a run acts on: its nonce, recorded with the run before the code starts."""

    nonce: str
    session_id: str


class ExecuteCodeInput(BaseModel):
    run_id: str = Field(description="unique per execution; keys the audit rows")
    code: str = Field(description="body of an async function; may call the bridged tools")
    allowed_tools: list[str] = Field(default_factory=list, description="the allow-set decided by the trust policy")
    actor: str = "sandbox"
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_calls: int = Field(default=50, ge=0)
    call_timeout_s: float = Field(default=30.0, gt=0)
    phase: Phase = Field(
        default="automatic", description="automatic = nobody approved this code (the safe reading when unsaid)")
    audit: list[AuditRow] = Field(
        default_factory=list, description="rows written, in order, before the code starts (the decision's own)")
    procedure_hashes: dict[str, str] = Field(
        default_factory=dict, description="stored procedure the code may call -> the hash of the body its review "
                                          "or policy decision saw; a body changed since is not replayed")
    decision: UsedDecision | None = Field(
        default=None, description="the signed decision that authorises this run, when a person's answer does: it "
                                  "authorises one workflow run, ever (a reset run re-sent it)")
    read_only_tools: list[str] = Field(
        default_factory=list, description="tools of the allow-set its decision judged read-only (in an automatic "
                                          "phase, all of them); a run in which one now reaches a tool that may "
                                          "change state is refused")
    tool_names: dict[str, str] = Field(
        default_factory=dict, description="Python name -> tool, as its review mapped them, for the allow-set and the "
                                          "tools of the procedures it may replay: the stubs call exactly these "
                                          "(empty: mapped over the run's catalogue)")


class CallRecord(BaseModel):
    """One bridged call as the operator (not the model) sees it."""

    seq: int
    tool: str
    args_sha256: str
    args_preview: str = Field(default="", description="the arguments as compact JSON, scrubbed, cut to ~200 characters")
    result_shape: str = Field(default="none", description="what came back, e.g. dict(status, jobs), list[12], str(340 chars)")
    outcome: CallOutcome
    reason: str | None = None
    bytes: int = 0
    duration_ms: float = 0.0
    redactions: int = 0


class StreamCapture(BaseModel):
    preview: str = ""
    total_bytes: int = 0
    truncated: bool = False
    redactions: int = 0


class SandboxRunResult(BaseModel):
    """Everything a run produced. ``isolation`` and ``warnings`` say how strong the boundary was."""

    run_id: str
    status: RunStatus
    isolation: Isolation
    warnings: list[str] = Field(default_factory=list)
    return_value: dict[str, Any] | None = None
    error: str | None = None
    stdout: StreamCapture = Field(default_factory=StreamCapture)
    stderr: StreamCapture = Field(default_factory=StreamCapture)
    full_output_ref: str | None = Field(default=None, description="blob sha256 of the full scrubbed transcript")
    calls: list[CallRecord] = Field(default_factory=list, description="the first calls; all of them are in calls_ref")
    calls_total: int = Field(default=0, description="how many call frames the run sent")
    calls_ref: str | None = Field(default=None, description="blob sha256 of the full call log when calls is cut short")
    memory_guard: MemoryGuardKind = Field(
        default="watchdog", description="how the run's total memory was bounded: a cgroup v2 leaf, or the RSS watchdog")
    exit_code: int | None = None
    duration_ms: float = 0.0
    warm_start: bool = False


@activity_stub("execute_code")
async def execute_code(inp: ExecuteCodeInput) -> SandboxRunResult:  # type: ignore[empty-body]  # contract stub: the worker registers the body
    """Run ``inp.code`` in the sandbox with exactly ``inp.allowed_tools`` reachable through the bridge."""
    ...


# An approved run is retried when its worker dies, never when the activity refused the retry (a
# state-changing run's first attempt may have changed something); the bound covers the slowest allowed run.
SANDBOX_CALL = ActivityOptions(
    task_queue=Queue.SANDBOX, start_to_close=timedelta(minutes=5), heartbeat=HEARTBEAT,
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3,
                      non_retryable_error_types=[RETRY_REFUSED]))
