"""The sandbox's limits: how long, how much output, how many calls. What a run is asked and what it
reports back are the sandbox contract (`bamboo/sandbox/contract.py`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
    run_disk_bytes: int | None = Field(
        default=None, ge=1024 * 1024,
        description="bytes a degraded run may hold in files at once, wherever it can write them (its work dir, /tmp, "
                    "/var/tmp, /dev/shm...; the watchdog counts them and kills the run past it); None = twice "
                    "tmpfs_bytes, what a bwrap run can write (its /tmp and its work dir, tmpfs_bytes each)")

    @property
    def run_total_bytes(self) -> int:
        return self.run_memory_bytes if self.run_memory_bytes is not None else self.memory_bytes

    @property
    def disk_total_bytes(self) -> int:
        """The degraded run's disk cap: as much as a bwrap run may write unless set. RLIMIT_FSIZE bounds one file only,
        and a run that looped over 15 MiB files took 6 GiB of the host's disk in 22 ms."""
        return self.run_disk_bytes if self.run_disk_bytes is not None else 2 * self.tmpfs_bytes

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
