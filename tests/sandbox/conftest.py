from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.service import CodeExecutor
from bamboo.sandbox.models import SandboxLimits
from bamboo.sandbox.runner import SandboxRunner
from bamboo.tools.model import ToolResult, ToolSpec

HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed (apt-get install -y bubblewrap)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop is only possible when the worker runs as root")

# Secrets a tool "accidentally" returns. Built at run time so the repository holds no literal key.
AWS_KEY = "AKIA" + "Q3EGRDVWZ7XKBJ4N"
GITHUB_TOKEN = "ghp_" + "9fK2mQ7xLp4Rt8Wv1Zb6Yc3Nd5Hs0Ja2Ge7Ui"

_markers = itertools.count(1)

TASK_SCHEMA = {
    "type": "object",
    "properties": {"task_id": {"type": "integer", "description": "JEDI task id"}},
    "required": ["task_id"],
    "additionalProperties": False,
}

SPECS = [
    ToolSpec(name="get_task", description="Fetch a PanDA task's status.", input_schema=TASK_SCHEMA, read_only=True),
    ToolSpec(name="get_log", description="Fetch 5 KB of a job log.", input_schema=TASK_SCHEMA, read_only=True),
    ToolSpec(name="leak_secret", description="Returns text with credentials in it.", read_only=True),
    ToolSpec(name="slow_tool", description="Never answers in time.", read_only=True),
    ToolSpec(name="kill_task", description="Kill a task.", input_schema=TASK_SCHEMA, read_only=False),
    ToolSpec(name="ask_operator", description="Ask a human.", read_only=True, requires_interaction=True),
]


class MemoryToolCaller:
    """In-memory tools; records every dispatched call so tests can assert what never reached a tool."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.first_call = asyncio.Event()

    def list_tools(self) -> list[ToolSpec]:
        return list(SPECS)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.calls.append((name, arguments))
        self.first_call.set()
        if name == "get_task":
            return ToolResult.success({"task_id": arguments["task_id"], "status": "running", "site": "CERN-PROD"})
        if name == "get_log":
            line = f"task {arguments['task_id']} | INFO | pilot.control.payload | event processed\n"
            return ToolResult.success((line * (5000 // len(line) + 1))[:5000])
        if name == "leak_secret":
            return ToolResult.success({"log": f"export AWS_ACCESS_KEY_ID={AWS_KEY}\nGITHUB_TOKEN={GITHUB_TOKEN}\nok"})
        if name == "slow_tool":
            await asyncio.sleep(30)
            return ToolResult.success("late")
        if name == "kill_task":
            return ToolResult.success({"killed": arguments["task_id"]})
        return ToolResult.failure(f"unknown tool {name}")

    def dispatched(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


def unique_limits(**overrides: Any) -> SandboxLimits:
    """Limits whose RLIMIT_FSIZE is unique, so the runs' processes can be found by their command line."""
    base = {"max_file_bytes": 16 * 1024 * 1024 + next(_markers) * 4096 + os.getpid() % 4096}
    base.update(overrides)
    return SandboxLimits(**base)


def processes_with_marker(limits: SandboxLimits) -> list[int]:
    marker = f'"max_file_bytes":{limits.max_file_bytes}'.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if marker in fh.read():
                    found.append(int(entry.name))
    return found


async def wait_until_gone(limits: SandboxLimits, seconds: float = 5.0) -> list[int]:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        left = processes_with_marker(limits)
        if not left or asyncio.get_running_loop().time() > deadline:
            return left
        await asyncio.sleep(0.05)


class Harness:
    def __init__(self, runner: SandboxRunner) -> None:
        self.runner = runner
        self.caller = MemoryToolCaller()
        self.audit = MemoryAuditSink()
        self.blobs = MemoryBlobSink()
        self.executor = CodeExecutor(runner=runner, caller=self.caller, specs=SPECS, audit=self.audit, blobs=self.blobs)
        self._runs = itertools.count(1)

    async def run(self, code: str, *, allowed: set[str] | frozenset[str] = frozenset({"get_task", "get_log"}),
                  timeout_s: float = 10.0, phase: str = "interactive", **kw: Any):
        """A run as an approved (interactive) turn makes it, unless the test says ``phase="automatic"``:
        a degraded sandbox refuses unattended runs, and most tests are about what a run can do."""
        return await self.executor.execute(
            run_id=f"test-{next(self._runs)}", code=code, allowed_tools=frozenset(allowed), timeout_s=timeout_s,
            phase=phase, **kw,
        )

    def audit_bodies(self) -> list[dict[str, Any]]:
        return [e.body for e in self.audit.events if e.kind == "tool_call"]


@contextlib.asynccontextmanager
async def harness(isolation: str = "bwrap", **runner_kw: Any) -> AsyncIterator[Harness]:
    runner_kw.setdefault("limits", unique_limits())
    runner = SandboxRunner(isolation=isolation, **runner_kw)  # type: ignore[arg-type]
    try:
        await runner.start()
        yield Harness(runner)
    finally:
        await runner.close()


@pytest.fixture
async def bw() -> AsyncIterator[Harness]:
    if not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    async with harness("bwrap") as h:
        yield h


@pytest.fixture
async def degraded() -> AsyncIterator[Harness]:
    if os.geteuid() != 0:
        pytest.skip("degraded isolation needs a root worker (a uid per run)")
    async with harness("degraded") as h:
        yield h


@pytest.fixture(params=["bwrap", "degraded"])
async def any_mode(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "bwrap" and not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    if request.param == "degraded" and os.geteuid() != 0:
        pytest.skip("degraded isolation needs a root worker (a uid per run)")
    async with harness(request.param) as h:
        yield h


@pytest.fixture
def worker_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A credential in the worker's environment that no sandboxed script may ever see."""
    value = "canary-" + os.urandom(12).hex()
    monkeypatch.setenv("BAMBOO_LLM_API_KEY", value)
    return value
