"""The bridge's decisions, frame by frame, without a child process."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from bamboo.audit import AuditEvent, MemoryAuditSink
from bamboo.sandbox.models import BridgeLimits
from bamboo.sandbox.bridge import ToolBridge, bridgeable
from bamboo.sandbox.bridge import args_digest
from bamboo.tools.model import ToolResult
from tests.sandbox.conftest import AWS_KEY, SPECS, MemoryToolCaller


class FailingAudit:
    async def append(self, event: AuditEvent) -> None:
        raise ConnectionError("audit store is down")


def make_bridge(allowed=("get_task", "get_log"), audit=None, **limits) -> tuple[ToolBridge, MemoryToolCaller, MemoryAuditSink]:
    caller = MemoryToolCaller()
    audit = audit if audit is not None else MemoryAuditSink()
    bridge = ToolBridge(
        run_id="run-1", caller=caller, specs=SPECS, allowed=frozenset(allowed), audit=audit,
        actor="tester", limits=BridgeLimits(**limits),
    )
    return bridge, caller, audit


def frame(bridge: ToolBridge, call_id: int, tool: str, args=None, token=None) -> dict:
    return {"type": "call", "token": bridge.token if token is None else token, "id": call_id, "tool": tool,
            "args": {"task_id": 1} if args is None else args}


async def test_allowed_call_is_dispatched_and_audited():
    bridge, caller, audit = make_bridge()
    reply = await bridge.handle_call(frame(bridge, 1, "get_task", {"task_id": 42}))
    assert reply["ok"] is True and reply["id"] == 1 and reply["data"]["task_id"] == 42
    assert caller.calls == [("get_task", {"task_id": 42})]
    [event] = audit.events
    assert event.kind == "tool_call" and event.run_id == "run-1" and event.actor == "tester"
    assert event.body["tool"] == "get_task" and event.body["outcome"] == "allowed"
    assert event.body["args_sha256"] == hashlib.sha256(b'{"task_id":42}').hexdigest()
    assert event.body["bytes"] == len(json.dumps(reply["data"]).encode())
    assert event.body["duration_ms"] >= 0


async def test_token_is_256_bits_and_unique_per_bridge():
    a, _, _ = make_bridge()
    b, _, _ = make_bridge()
    assert len(bytes.fromhex(a.token)) == 32 and a.token != b.token


@pytest.mark.parametrize("token", ["", "x" * 64, None, 12345])
async def test_wrong_token_is_denied_and_poisons_the_bridge(token):
    bridge, caller, audit = make_bridge()
    bad = frame(bridge, 1, "get_task")
    bad["token"] = token
    reply = await bridge.handle_call(bad)
    assert reply["ok"] is False and reply["denied"] is True
    later = await bridge.handle_call(frame(bridge, 2, "get_task"))
    assert later["ok"] is False and "closed" in later["error"]
    assert caller.calls == []
    assert [e.body["reason"] for e in audit.events] == ["bad_token", "bridge_closed"]


async def test_replayed_and_out_of_order_ids_are_denied():
    bridge, caller, _ = make_bridge()
    assert (await bridge.handle_call(frame(bridge, 5, "get_task")))["ok"]
    for stale in (5, 4, "6", True):
        reply = await bridge.handle_call(frame(bridge, stale, "get_task"))
        assert reply["ok"] is False and "fresh" in reply["error"]
    assert len(caller.calls) == 1


async def test_allow_set_is_checked_at_call_time_with_a_clear_message():
    bridge, caller, audit = make_bridge()
    reply = await bridge.handle_call(frame(bridge, 1, "kill_task"))
    assert reply["denied"] and "'kill_task' is not allowed in this run (allowed: get_log, get_task)" in reply["error"]
    assert caller.calls == [] and audit.events[0].body["outcome"] == "denied"


async def test_unknown_tool_is_denied():
    bridge, caller, _ = make_bridge(allowed=("get_task", "no_such_tool"))
    reply = await bridge.handle_call(frame(bridge, 1, "no_such_tool"))
    assert reply["denied"] and caller.calls == []


async def test_human_input_tools_are_never_bridged_even_when_allowed():
    bridge, caller, audit = make_bridge(allowed=("ask_operator", "get_task"))
    assert [s.name for s in bridge.bridged_specs] == ["get_task"]
    reply = await bridge.handle_call(frame(bridge, 1, "ask_operator", {}))
    assert reply["denied"] and caller.calls == []
    assert audit.events[0].body["reason"] == "requires_interaction"


def test_bridgeable_is_the_allow_set_minus_interaction():
    names = {s.name for s in bridgeable(SPECS, frozenset({"get_task", "kill_task", "ask_operator", "ghost"}))}
    assert names == {"get_task", "kill_task"}


@pytest.mark.parametrize(
    "args", [{"task_id": "1"}, {}, {"task_id": 1, "extra": True}, ["task_id", 1], "not an object"]
)
async def test_arguments_must_match_the_schema(args):
    bridge, caller, audit = make_bridge()
    reply = await bridge.handle_call(frame(bridge, 1, "get_task", args))
    assert reply["denied"] and caller.calls == []
    assert audit.events[0].body["reason"] == "invalid_arguments"


async def test_call_budget():
    bridge, caller, _ = make_bridge(max_calls=2)
    replies = [await bridge.handle_call(frame(bridge, i, "get_task")) for i in range(1, 5)]
    assert [r["ok"] for r in replies] == [True, True, False, False]
    assert "at most 2" in replies[2]["error"] and len(caller.calls) == 2


async def test_deadline_passed_is_denied_and_audited():
    bridge, caller, audit = make_bridge()
    bridge.set_deadline(time.monotonic() - 0.01)
    reply = await bridge.handle_call(frame(bridge, 1, "get_task"))
    assert reply["denied"] and "deadline" in reply["error"]
    assert caller.calls == [] and audit.events[0].body["reason"] == "deadline_passed"


async def test_closed_bridge_refuses():
    bridge, caller, _ = make_bridge()
    bridge.close("the run has ended")
    reply = await bridge.handle_call(frame(bridge, 1, "get_task"))
    assert reply["denied"] and "the run has ended" in reply["error"] and caller.calls == []


async def test_per_call_timeout():
    bridge, _, audit = make_bridge(allowed=("slow_tool",), call_timeout_s=0.2)
    reply = await bridge.handle_call(frame(bridge, 1, "slow_tool", {}))
    assert reply["ok"] is False and not reply.get("denied") and "did not answer" in reply["error"]
    assert audit.events[0].body["outcome"] == "error" and audit.events[0].body["reason"] == "timeout"


async def test_results_are_scrubbed_before_they_enter_the_sandbox():
    bridge, _, _ = make_bridge(allowed=("leak_secret",))
    reply = await bridge.handle_call(frame(bridge, 1, "leak_secret", {}))
    assert reply["ok"] and AWS_KEY not in json.dumps(reply)
    assert bridge.calls[0].redactions >= 2


async def test_result_size_cap():
    bridge, _, audit = make_bridge(max_result_bytes=1000)
    reply = await bridge.handle_call(frame(bridge, 1, "get_log"))
    assert reply["ok"] is False and "cap" in reply["error"]
    assert audit.events[0].body["reason"] == "result_too_large" and audit.events[0].body["bytes"] > 1000


async def test_tool_failures_and_exceptions_become_errors_not_crashes():
    class Broken(MemoryToolCaller):
        async def call_tool(self, name, arguments):
            if arguments["task_id"] == 1:
                raise RuntimeError("connection reset with password=hunter2hunter2")
            return ToolResult.failure("PanDA said no")

    caller = Broken()
    audit = MemoryAuditSink()
    bridge = ToolBridge(run_id="r", caller=caller, specs=SPECS, allowed=frozenset({"get_task"}), audit=audit)
    crashed = await bridge.handle_call(frame(bridge, 1, "get_task", {"task_id": 1}))
    failed = await bridge.handle_call(frame(bridge, 2, "get_task", {"task_id": 2}))
    assert crashed["ok"] is False and "hunter2" not in crashed["error"]
    assert "hunter2" not in repr([e.body for e in audit.events])
    assert failed["ok"] is False and "PanDA said no" in failed["error"]
    assert [e.body["outcome"] for e in audit.events] == ["error", "error"]


async def test_audit_failure_closes_the_bridge():
    bridge, caller, _ = make_bridge(audit=FailingAudit())
    first = await bridge.handle_call(frame(bridge, 1, "get_task"))
    second = await bridge.handle_call(frame(bridge, 2, "get_task"))
    assert first["ok"] is False and "audit" in first["error"]
    assert second["ok"] is False and len(caller.calls) == 1


def test_args_digest_is_canonical():
    assert args_digest({"b": 1, "a": 2}) == args_digest({"a": 2, "b": 1})
    assert args_digest({"a": 1}) != args_digest({"a": 2})



async def test_a_call_cut_off_by_the_end_of_the_run_is_still_audited():
    import asyncio

    bridge, caller, audit = make_bridge(allowed=("slow_tool",))
    task = asyncio.create_task(bridge.handle_call(frame(bridge, 1, "slow_tool", {})))
    while not caller.calls:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [(e.body["outcome"], e.body["reason"]) for e in audit.events] == [("error", "cancelled_in_flight")]


async def test_call_records_narrate_arguments_and_result_shape():
    bridge, _, audit = make_bridge(allowed=("get_task", "get_log", "leak_secret"))
    await bridge.handle_call(frame(bridge, 1, "get_task", {"task_id": 42}))
    await bridge.handle_call(frame(bridge, 2, "get_log", {"task_id": 7}))
    await bridge.handle_call(frame(bridge, 3, "leak_secret", {"note": f"key {AWS_KEY}"}))
    await bridge.handle_call(frame(bridge, 4, "get_task", {"task_id": "x" * 1000}))
    first, second, third, fourth = bridge.calls
    assert first.args_preview == '{"task_id":42}' and first.result_shape == "dict(task_id, status, site)"
    assert second.result_shape == "str(5000 chars)"
    assert AWS_KEY not in third.args_preview and "REDACTED" in third.args_preview
    assert len(fourth.args_preview) < 260 and fourth.result_shape == "none"
    assert audit.events[0].body["args_preview"] == '{"task_id":42}'


def test_result_shapes():
    from bamboo.sandbox.bridge import result_shape

    assert result_shape({"status": 1, "jobs": []}) == "dict(status, jobs)"
    assert result_shape(list(range(12))) == "list[12]" and result_shape("a" * 340) == "str(340 chars)"
    assert result_shape(None) == "none" and result_shape(3) == "int"


def test_phase_defaults_to_automatic_at_the_sandbox_boundary():
    from bamboo.sandbox.contract import ExecuteCodeInput

    assert ExecuteCodeInput(run_id="r", code="").phase == "automatic"


async def test_the_bridge_checks_arguments_with_the_tools_own_validator():
    """One validator for the bridge and the tools: a misspelt argument of a tool whose schema leaves
    additionalProperties open is refused at the bridge, naming it, instead of reaching the tool."""
    from bamboo.tools.model import ToolSpec

    open_schema = {"type": "object", "properties": {"task_id": {"type": "integer"}}, "required": ["task_id"]}
    bridge, caller, audit = make_bridge(allowed=("get_task",))
    bridge._specs["get_task"] = ToolSpec(name="get_task", description="d", input_schema=open_schema, read_only=True)
    reply = await bridge.handle_call(frame(bridge, 1, "get_task", {"task_id": 1, "taskid": 2}))
    assert reply["denied"] and caller.calls == []
    assert "'taskid'" in reply["error"] and audit.events[0].body["reason"] == "invalid_arguments"


async def test_a_tool_with_an_unusable_schema_is_refused_not_called():
    from bamboo.tools.model import ToolSpec

    bridge, caller, audit = make_bridge(allowed=("get_task",))
    bridge._specs["get_task"] = ToolSpec(name="get_task", description="d", input_schema={"type": "nonsense"},
                                         read_only=True)
    reply = await bridge.handle_call(frame(bridge, 1, "get_task", {"task_id": 1}))
    assert reply["denied"] and caller.calls == [] and audit.events[0].body["reason"] == "invalid_schema"


class AuditDownAfter(MemoryAuditSink):
    """Writes the first `rows` rows, then fails: the audit log lost in the middle of a run."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    async def append(self, event: AuditEvent, dedup_key: str | None = None) -> int | None:
        if len(self.events) >= self.rows:
            raise ConnectionError("audit store is down")
        return await super().append(event, dedup_key)


async def test_a_state_changing_call_is_not_made_when_its_row_cannot_be_written_first():
    # Written after the call only, a row lost to an audit outage left a kill in PanDA with nothing in the chain.
    bridge, caller, _ = make_bridge(allowed=("kill_task",), audit=FailingAudit())
    reply = await bridge.handle_call(frame(bridge, 1, "kill_task", {"task_id": 9}))
    assert reply["ok"] is False and "audit" in reply["error"]
    assert caller.calls == [] and bridge.audit_failed


async def test_a_state_changing_call_is_in_the_chain_before_it_is_made_even_if_its_result_row_is_lost():
    audit = AuditDownAfter(rows=1)
    bridge, caller, _ = make_bridge(allowed=("kill_task",), audit=audit)
    reply = await bridge.handle_call(frame(bridge, 1, "kill_task", {"task_id": 9}))
    assert caller.calls == [("kill_task", {"task_id": 9})]
    [started] = audit.events
    assert started.kind == "tool_call_started" and started.body["tool"] == "kill_task" and started.body["seq"] == 1
    assert started.body["args_sha256"] == hashlib.sha256(b'{"task_id":9}').hexdigest()
    assert reply["ok"] is False and "audit" in reply["error"] and bridge.audit_failed


async def test_a_state_changing_call_has_its_started_row_then_its_result_row_and_a_read_only_its_result():
    bridge, caller, audit = make_bridge(allowed=("kill_task", "get_task"))
    assert (await bridge.handle_call(frame(bridge, 1, "kill_task", {"task_id": 9})))["ok"] is True
    assert (await bridge.handle_call(frame(bridge, 2, "get_task", {"task_id": 9})))["ok"] is True
    assert [(e.kind, e.body["tool"]) for e in audit.events] == [
        ("tool_call_started", "kill_task"), ("tool_call", "kill_task"), ("tool_call", "get_task")]


def test_a_preview_scrubs_what_it_can_show_not_the_whole_megabyte(monkeypatch):
    """A call frame may carry a megabyte of arguments; the preview shows 200 characters of them. Scrubbing the whole
    value cost a quarter of a second of the worker's CPU per call, denied calls included (their event loop stalled
    through the GIL). Only a copy a preview cannot tell apart is scrubbed now, and secrets are still redacted."""
    from bamboo.sandbox import bridge as bridge_mod

    seen: list[int] = []
    real = bridge_mod.scrub_value

    def measured(value):
        seen.append(len(json.dumps(value)))
        return real(value)

    monkeypatch.setattr(bridge_mod, "scrub_value", measured)
    huge = {"password": "hunter2" * 150_000, "jobs": [{"id": i, "log": "x" * 1000} for i in range(2_000)],
            "note": "token ghp_" + "A" * 36}
    preview = bridge_mod.args_preview(huge)
    assert seen and seen[0] < 256 * 1024, seen  # the whole value: 3 MB
    assert "hunter2" not in preview and preview.startswith('{"password":"[REDACTED') and preview.endswith("…")
    assert bridge_mod.args_preview({"note": "token ghp_" + "A" * 36}) == '{"note":"token [REDACTED:github_token]"}'


def test_a_frame_with_an_integer_past_the_digit_limit_is_a_protocol_error():
    """Python refuses integers over 4,300 digits with a plain ValueError, which no handler of the bridge caught:
    one such frame from the sandbox raised out of the run (no report, no audit row, and a retry ran the code
    again). It is a refused frame like any other malformed one."""
    from bamboo.sandbox.protocol import ProtocolError, decode_frame

    with pytest.raises(ProtocolError, match="cannot hold"):
        decode_frame(b'{"type": "call", "args": {"task_id": ' + b"9" * 5000 + b"}}")
