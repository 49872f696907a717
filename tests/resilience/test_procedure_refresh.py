"""Refreshing the procedure catalogue: a store unchanged since it was last judged is not scanned again, the
scans run off the event loop within a budget, and a remembered read-only verdict never outlives anything it was
judged from (the verdict decides what an unattended run may call).

No assertion here is on wall time: work is counted by spying on the scan, and where it runs by the thread
that ran it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import policy.procedures
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.investigation import procedure_tools
from bamboo.investigation.procedure_tools import ProcedureToolCaller, exposed_procedures
from bamboo.offload import BudgetExceeded
from bamboo.tools.model import ToolResult, ToolSpec
from policy.procedures import assess_read_only, is_exposable_procedure
from policy.signature import CodeSignature, scan_code

READ_BOTH = "j = await tools.get_jobs(task_id=task_id)\nt = await tools.get_task(task_id=task_id)\nreturn {'n': len(j)}\n"
KILL_TOO = "j = await tools.get_jobs(task_id=task_id)\nawait tools.kill_task(task_id=task_id)\nreturn {'n': len(j)}\n"


class Base:
    """The raw tools: their read-only flags are the catalogue facts a verdict reads."""

    def __init__(self, read_only: dict[str, bool] | None = None) -> None:
        self.read_only = read_only or {"get_jobs": True, "get_task": True, "kill_task": False}

    def list_tools(self) -> list[ToolSpec]:
        return [ToolSpec(name=name, read_only=flag) for name, flag in self.read_only.items()]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult.success({})


class Store:
    """The approved procedures' rows, edited in place by a test."""

    def __init__(self, code: dict[str, str]) -> None:
        self.code = code

    async def approved_code(self) -> dict[str, str]:
        return dict(self.code)


class Scans:
    """Counts every scan of a body (the walk's and the spec's) and the threads they ran on."""

    def __init__(self) -> None:
        self.count = 0
        self.threads: set[int] = set()

    def __call__(self, code: str, *args: Any) -> CodeSignature:
        self.count += 1
        self.threads.add(threading.get_ident())
        return scan_code(code, *args)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scans]:
    """A scan spy (each caller remembers its own judgement: nothing is shared between tests)."""
    spy = Scans()
    monkeypatch.setattr(policy.procedures, "scan_code", spy)
    yield spy


def caller(store: Store, base: Base | None = None, *, allow_mutating_autorun: bool = False) -> ProcedureToolCaller:
    return ProcedureToolCaller(base or Base(), store, None, MemoryAuditSink(), MemoryBlobSink(),
                               allow_mutating_autorun=allow_mutating_autorun)


def listed(tools: ProcedureToolCaller) -> dict[str, bool]:
    """Each listed procedure and whether it is listed as read-only."""
    return {s.name: s.read_only for s in tools.list_tools() if s.name.startswith("proc__")}


async def test_unchanged_rows_are_not_scanned_again(scans: Scans) -> None:
    store = Store({f"proc__p{i:02d}": READ_BOTH + f"# {i}\n" for i in range(20)})
    tools = caller(store)
    await tools.refresh()
    assert scans.count >= 20 and len(listed(tools)) == 20
    scans.count = 0
    await tools.refresh()
    assert scans.count == 0, f"a refresh of unchanged rows scanned {scans.count} bodies again"
    store.code["proc__p07"] = READ_BOTH + "# edited\n"
    await tools.refresh()
    assert scans.count >= 20, "a change judges the store again (the cost of not tracking what each verdict read)"
    assert len(listed(tools)) == 20


async def test_the_scans_run_off_the_event_loop_through_in_thread(scans: Scans, monkeypatch: pytest.MonkeyPatch) -> None:
    offloaded: list[str] = []
    real = procedure_tools.__dict__.get("in_thread")

    async def spy(fn: Callable[..., Any], *args: Any, budget_s: float, what: str) -> Any:
        offloaded.append(what)
        assert budget_s > 0
        assert real is not None
        return await real(fn, *args, budget_s=budget_s, what=what)

    monkeypatch.setattr(procedure_tools, "in_thread", spy, raising=False)
    await caller(Store({"proc__a": READ_BOTH, "proc__b": READ_BOTH + "# b\n"})).refresh()
    assert offloaded, "refresh did not hand its scans to in_thread"
    assert scans.count and threading.get_ident() not in scans.threads, "a body was scanned on the event loop"


async def test_a_body_rewritten_to_change_state_loses_its_read_only_verdict(scans: Scans) -> None:
    store = Store({"proc__a": READ_BOTH})
    tools, mutating = caller(store), caller(store, allow_mutating_autorun=True)
    await tools.refresh()
    await mutating.refresh()
    assert listed(tools) == {"proc__a": True} and listed(mutating) == {"proc__a": True}
    store.code["proc__a"] = KILL_TOO
    await tools.refresh()
    await mutating.refresh()
    assert listed(tools) == {}, "a body that kills was still offered as a read-only procedure"
    assert listed(mutating) == {"proc__a": False}


async def test_a_tool_whose_flag_changed_gives_a_fresh_verdict(scans: Scans) -> None:
    base = Base()
    tools = caller(Store({"proc__a": READ_BOTH}), base)
    await tools.refresh()
    assert listed(tools) == {"proc__a": True}
    base.read_only["get_task"] = False  # the server now says get_task changes state
    await tools.refresh()
    assert listed(tools) == {}
    del base.read_only["get_task"]  # no longer listed: not read-only either
    await tools.refresh()
    assert listed(tools) == {}
    base.read_only["get_task"] = True
    await tools.refresh()
    assert listed(tools) == {"proc__a": True}


async def test_a_procedure_is_judged_again_when_one_it_calls_changes(scans: Scans) -> None:
    outer = "r = await tools.proc__inner(task_id=task_id)\nt = await tools.get_task(task_id=task_id)\nreturn r\n"
    store = Store({"proc__outer": outer, "proc__inner": READ_BOTH})
    tools = caller(store)
    await tools.refresh()
    assert listed(tools) == {"proc__inner": True, "proc__outer": True}
    store.code["proc__inner"] = KILL_TOO  # outer's own body is unchanged
    await tools.refresh()
    assert listed(tools) == {}, "a procedure that reaches a kill through another kept its read-only verdict"
    del store.code["proc__inner"]  # a procedure it calls that has no stored code counts as state-changing
    await tools.refresh()
    assert listed(tools) == {}
    store.code["proc__inner"] = READ_BOTH
    await tools.refresh()
    assert listed(tools) == {"proc__inner": True, "proc__outer": True}


async def test_the_remembered_exposure_is_the_policy_rule(scans: Scans) -> None:
    specs = Base().list_tools()
    code = {
        "proc__read": READ_BOTH, "proc__kill": KILL_TOO,
        "proc__one": "return await tools.get_task(task_id=task_id)\n",
        "proc__opaque": "f = getattr(tools, 'kill_' + 'task')\nawait f()\nawait tools.get_task(task_id=1)\n",
        "proc__broken": "def (:\n",
        "proc__loop": "await tools.proc__loop(task_id=1)\nawait tools.get_task(task_id=1)\n",
        "proc__nested": "await tools.proc__read(task_id=1)\nawait tools.proc__gone(task_id=1)\n",
    }
    flags = {s.name: s.read_only for s in specs}
    for allow in (False, True):
        expected = sorted(n for n in code if is_exposable_procedure(n, flags, code, allow))
        assert exposed_procedures(specs, code, allow) == expected
        tools = caller(Store(code), allow_mutating_autorun=allow)
        await tools.refresh()
        assert listed(tools) == {n: assess_read_only(code[n], flags, code).read_only for n in expected}


async def test_past_its_budget_a_refresh_fails_and_lists_no_procedure(scans: Scans, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = caller(Store({"proc__a": READ_BOTH}))
    tools._executor = SimpleNamespace()  # type: ignore[assignment]  # reached only if the replay went ahead
    await tools.refresh()
    assert listed(tools) == {"proc__a": True}

    async def too_slow(fn: Callable[..., Any], *args: Any, budget_s: float, what: str) -> Any:
        raise BudgetExceeded(f"{what} took longer than {budget_s:g} s")

    monkeypatch.setattr(procedure_tools, "in_thread", too_slow, raising=False)
    with pytest.raises(BudgetExceeded, match="judging 1 stored procedures took longer than"):
        await tools.refresh()
    assert listed(tools) == {}, "a procedure was listed from a catalogue the refresh could not judge"
    result = await tools.replay("proc__a", {"task_id": 1})
    assert not result.ok and "cannot be replayed now" in (result.error or "")
    assert "\n" not in (result.error or "")


async def test_a_replay_on_an_unchanged_store_judges_nothing_again(scans: Scans) -> None:
    store = Store({f"proc__p{i:02d}": READ_BOTH + f"# {i}\n" for i in range(20)})
    tools = caller(store)
    ran: list[dict[str, Any]] = []

    async def execute(**run: Any) -> SimpleNamespace:
        ran.append(run)
        return SimpleNamespace(status="ok", error=None, return_value={"n": 1})

    tools._executor = SimpleNamespace(execute=execute)  # type: ignore[assignment]
    await tools.refresh()
    scans.count = 0
    result = await tools.replay("proc__p03", {"task_id": 5})
    assert result.ok and len(ran) == 1 and ran[0]["allowed_tools"] == {"get_jobs", "get_task"}
    assert scans.count <= 1, f"one replay scanned {scans.count} bodies (the store holds 20)"
