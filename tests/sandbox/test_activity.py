"""The execute_code activity: heartbeats, cancellation kills the child, name pinned, unsafe retry refused."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.contract import activity_name
from bamboo.sandbox import contract
from bamboo.sandbox.contract import ExecuteCodeInput, SandboxRunResult
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.runner import SandboxRunner
from tests.sandbox.conftest import HAS_BWRAP, MemoryToolCaller, processes_with_marker, unique_limits, wait_until_gone

ISOLATION = "bwrap" if HAS_BWRAP else "degraded"


def make(limits=None):
    runner = SandboxRunner(isolation=ISOLATION, limits=limits or unique_limits())
    caller = MemoryToolCaller()
    acts = SandboxActivities(runner=runner, caller=caller, audit=MemoryAuditSink(), blobs=MemoryBlobSink())  # live catalogue
    return runner, caller, acts


def env_with(heartbeat_timeout_s: float = 0.3, attempt: int = 1) -> tuple[ActivityEnvironment, list]:
    env = ActivityEnvironment()
    beats: list = []
    env.on_heartbeat = lambda *details: beats.append(details)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=heartbeat_timeout_s), attempt=attempt)
    return env, beats


def test_activity_name_is_pinned():
    _, _, acts = make()
    assert activity._Definition.must_from_callable(acts.execute_code).name == activity_name(contract.execute_code) == "execute_code"


async def test_runs_code_and_heartbeats_while_the_child_runs():
    runner, caller, acts = make()
    env, beats = env_with(0.3)
    code = "import asyncio\nt = await tools.get_task(task_id=3)\nawait asyncio.sleep(1.0)\nprint('done')\nreturn {'status': t['status']}"
    try:
        out = await env.run(
            acts.execute_code, ExecuteCodeInput(run_id="act-1", code=code, allowed_tools=["get_task"], timeout_s=10)
        )
    finally:
        await runner.close()
    assert isinstance(out, SandboxRunResult)
    assert out.status == "ok" and out.return_value == {"status": "running"}
    assert out.stdout.preview == "done\n" and out.full_output_ref
    assert [c.tool for c in out.calls] == ["get_task"]
    assert len(beats) >= 3 and beats[0][0]["run_id"] == "act-1"


async def test_cancellation_kills_the_child():
    limits = unique_limits()
    runner, caller, acts = make(limits)
    env, _ = env_with(0.3)
    code = "await tools.get_task(task_id=1)\nimport time\nwhile True:\n    time.sleep(0.05)"
    task = asyncio.create_task(
        env.run(acts.execute_code, ExecuteCodeInput(run_id="act-2", code=code, allowed_tools=["get_task"], timeout_s=60))
    )
    try:
        await asyncio.wait_for(caller.first_call.wait(), 20)
        assert processes_with_marker(limits), "the child should be running before the cancel"
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_until_gone(limits) == []
    finally:
        await runner.close()


async def test_retry_with_state_changing_tools_is_refused():
    runner, caller, acts = make()
    env, _ = env_with(attempt=2)
    try:
        with pytest.raises(ApplicationError) as info:
            await env.run(
                acts.execute_code,
                ExecuteCodeInput(run_id="act-3", code="return {}", allowed_tools=["get_task", "kill_task"]),
            )
        assert info.value.non_retryable and "kill_task" in str(info.value)
        # a tool the run's decision did not judge read-only blocks the retry even when the catalogue does not list
        # it now (an MCP server reconnecting): the live listing alone made such a retry look safe
        with pytest.raises(ApplicationError) as unlisted:
            await env.run(acts.execute_code, ExecuteCodeInput(run_id="act-5", code="return {}", allowed_tools=[
                "get_task", "ext_kill_task"], read_only_tools=["get_task"], phase="interactive"))
        assert unlisted.value.non_retryable and "ext_kill_task" in str(unlisted.value)
        again = await env.run(acts.execute_code, ExecuteCodeInput(run_id="act-4", code="return {}", allowed_tools=["get_task"],
                                                                  read_only_tools=["get_task"], phase="interactive"))
        assert again.status == "ok"
    finally:
        await runner.close()
    assert caller.calls == []
