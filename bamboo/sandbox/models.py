"""Boundary models of the sandbox: limits, the call log, and what a run reports back."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Isolation = Literal["bwrap", "degraded"]
RunStatus = Literal["ok", "error", "timeout", "output_limit", "memory_limit", "call_limit", "crashed"]
CallOutcome = Literal["allowed", "denied", "error"]
Phase = Literal["automatic", "interactive"]
MemoryGuardKind = Literal["cgroup", "watchdog"]


class SandboxLimits(BaseModel):
    """Per-child resource limits. A warm pool is built for one set of limits."""

    model_config = ConfigDict(frozen=True)

    cpu_seconds: int = Field(default=10, ge=1, description="RLIMIT_CPU; the kernel kills a busy loop past it")
    memory_bytes: int = Field(default=768 * 1024 * 1024, ge=64 * 1024 * 1024, description="RLIMIT_AS")
    max_processes: int = Field(
        default=128, ge=1,
        description="RLIMIT_NPROC for the run's uid; with a root worker every run has a uid of its own, so it "
                    "bounds one run's processes and threads (otherwise all children share the worker's uid)")
    run_memory_bytes: int | None = Field(
        default=None, ge=32 * 1024 * 1024,
        description="total memory of the run's whole process tree (cgroup memory.max, or the RSS watchdog); "
                    "None = the same as memory_bytes")
    max_file_bytes: int = Field(default=16 * 1024 * 1024, ge=0, description="RLIMIT_FSIZE")
    max_open_files: int = Field(default=64, ge=8, description="RLIMIT_NOFILE")
    tmpfs_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024, description="size of /tmp and the work dir (bwrap)")

    @property
    def run_total_bytes(self) -> int:
        return self.run_memory_bytes if self.run_memory_bytes is not None else self.memory_bytes

    def child_view(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "max_processes": self.max_processes,
            "max_file_bytes": self.max_file_bytes,
            "max_open_files": self.max_open_files,
        }


class OutputLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    capture_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, description="full output kept (blob); beyond it the child is killed")
    preview_bytes: int = Field(default=4096, ge=256, description="what the model sees, per stream")
    max_return_bytes: int = Field(default=256 * 1024, ge=1024, description="serialised return value")


class BridgeLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_calls: int = Field(
        default=50, ge=0,
        description="call frames a run may send, denied and malformed ones included; the next one stops the run")
    call_timeout_s: float = Field(default=30.0, gt=0)
    max_result_bytes: int = Field(default=256 * 1024, ge=256)
    max_concurrent_calls: int = Field(default=4, ge=1)


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
