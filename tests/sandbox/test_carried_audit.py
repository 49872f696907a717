"""The audit rows a run carries (the decision that lets it run) are written before its code starts, in order and
under their dedup keys; rows that cannot be written keep the code from running (issue 25)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.audit import AuditEvent, MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.contract import AUDIT_UNWRITTEN, AuditRow, ExecuteCodeInput
from bamboo.sandbox.runner import SandboxRunner
from bamboo.tools.model import ToolResult
from tests.sandbox.conftest import HAS_BWRAP, MemoryToolCaller, unique_limits

ISOLATION: Literal["bwrap", "degraded"] = "bwrap" if HAS_BWRAP else "degraded"
CODE = "t = await tools.get_task(task_id=7)\nreturn {'status': t['status']}"


def carried(session: str = "s1") -> list[AuditRow]:
    return [AuditRow(kind="review_decided", actor="policy", run_id=f"investigate:{session}",
                     body={"session": session, "turn": 1}, dedup_key=f"{session}:audit:3"),
            AuditRow(kind="decision_accepted", actor="bob", run_id=f"investigate:{session}",
                     body={"session": session, "turn": 1, "approver": "bob"}, dedup_key=f"{session}:audit:4")]


class KeyedAudit(MemoryAuditSink):
    """Keeps events with their dedup keys."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str | None] = []

    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        self.keys.append(dedup_key)
        return await super().append(event, dedup_key)


class LookingCaller(MemoryToolCaller):
    """Notes what the audit held when the run's first tool call reached it."""

    def __init__(self, audit: KeyedAudit) -> None:
        super().__init__()
        self.audit = audit
        self.seen_at_first_call: list[tuple[str, str | None]] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self.seen_at_first_call is None:
            self.seen_at_first_call = [(e.kind, k) for e, k in zip(self.audit.events, self.audit.keys)]
        return await super().call_tool(name, arguments)


class DownAudit(KeyedAudit):
    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        raise ConnectionError("the audit store is down")


def make(audit: KeyedAudit) -> tuple[SandboxRunner, LookingCaller, SandboxActivities]:
    runner = SandboxRunner(isolation=ISOLATION, limits=unique_limits())
    caller = LookingCaller(audit)
    return runner, caller, SandboxActivities(runner=runner, caller=caller, audit=audit, blobs=MemoryBlobSink())


async def test_the_carried_rows_are_written_before_the_first_tool_call() -> None:
    audit = KeyedAudit()
    runner, caller, acts = make(audit)
    try:
        out = await ActivityEnvironment().run(acts.execute_code, ExecuteCodeInput(
            run_id="investigate:s1:t1:abc:9", code=CODE, allowed_tools=["get_task"], phase="interactive",
            actor="bob", audit=carried()))
    finally:
        await runner.close()
    assert out.status == "ok", out.error
    assert caller.seen_at_first_call is not None
    assert caller.seen_at_first_call[:2] == [("review_decided", "s1:audit:3"), ("decision_accepted", "s1:audit:4")]
    first = audit.events[0]
    assert (first.run_id, first.actor, first.body) == ("investigate:s1", "policy", {"session": "s1", "turn": 1})
    assert [e.kind for e in audit.events[2:]][:1] == ["tool_call"]


async def test_rows_that_cannot_be_written_keep_the_code_from_running() -> None:
    runner, caller, acts = make(DownAudit())
    try:
        with pytest.raises(ApplicationError) as refused:
            await ActivityEnvironment().run(acts.execute_code, ExecuteCodeInput(
                run_id="investigate:s2:t1:abc:9", code=CODE, allowed_tools=["get_task", "kill_task"],
                phase="interactive", actor="bob", audit=carried("s2")))
    finally:
        await runner.close()
    assert refused.value.type == AUDIT_UNWRITTEN and refused.value.non_retryable
    assert "did not run" in str(refused.value)
    assert caller.calls == []


async def test_a_run_without_rows_writes_none_first() -> None:
    """Automatic steps (analysis, accumulation) carry nothing: their first row is still their first frame's."""
    audit = KeyedAudit()
    runner, caller, acts = make(audit)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=1)
    try:
        out = await env.run(acts.execute_code, ExecuteCodeInput(run_id="auto-1", code=CODE, allowed_tools=["get_task"]))
    finally:
        await runner.close()
    assert out.status == "ok", out.error
    assert caller.seen_at_first_call == [] and audit.events[0].kind == "tool_call"
