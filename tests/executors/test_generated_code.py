"""Generated code calls a command tool: the real bwrap sandbox, its token-gated bridge, and a staging.ro
executor running curl against the PanDA API under an envelope the worker's agent key signed."""

from __future__ import annotations

import pytest

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.executors.tool_caller import RemoteCommandTools
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from policy.signing import DEFAULT_DEPLOYMENT
from tests.sandbox.conftest import needs_bwrap, unique_limits

pytestmark = needs_bwrap


@pytest.fixture
async def sandbox():
    runner = SandboxRunner(isolation="bwrap", limits=unique_limits())
    await runner.start()
    try:
        yield runner
    finally:
        await runner.close()


def _code(argv: list[str]) -> str:
    return ("try:\n"
            f"    r = await tools.panda_curl(argv={argv!r})\n"
            "    return {'stdout': r['stdout'], 'exit_code': r['exit_code']}\n"
            "except Exception as exc:\n"
            "    return {'error': str(exc)}\n")


async def _run(h, sandbox, code: str):
    tools = RemoteCommandTools(h.policy, h.client, h.agent, deployment=DEFAULT_DEPLOYMENT, environment="staging",
                               queue=h.queue)
    assert [s.name for s in tools.list_tools()] == ["panda_curl", "config_git"]
    assert all(s.read_only for s in tools.list_tools())
    executor = CodeExecutor(runner=sandbox, caller=tools, audit=MemoryAuditSink(), blobs=MemoryBlobSink())
    async with h.executor(h.config("staging", "ro")):
        return await executor.execute(run_id="gen-1", code=code, allowed_tools=frozenset({"panda_curl"}),
                                      timeout_s=30, phase="automatic")


async def test_generated_code_reads_through_the_staging_executor(harness, sandbox):
    h = harness
    result = await _run(h, sandbox, _code(h.status_argv()))
    assert result.status == "ok", result
    assert result.return_value["exit_code"] == 0 and "running" in result.return_value["stdout"], result.return_value
    assert ("executor_ran", None) in await h.audit_kinds()


async def test_generated_code_cannot_reach_a_write(harness, sandbox):
    """The kill's shape has a rule only on prod.rw: on the read channel it is refused and never sent."""
    h = harness
    result = await _run(h, sandbox, _code(h.kill_argv()))
    assert result.status == "ok", result
    assert "command refused" in result.return_value["error"], result.return_value
    assert h.kills_on_server() == 0
