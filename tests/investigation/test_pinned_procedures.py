"""A run replays the stored procedures its decision saw, with the bodies it saw.

A procedure's body is a database row, re-read when the approved code calls it: changed between the review and the
run (by anyone who can write the table, or another session's finalize approving new code under the same name), the
approved call replayed code nobody reviewed — with ``allow_mutating_autorun`` even code that changes state. The
workflow now hands each run the hash of every procedure body its decision saw, and a body that no longer has it is
not replayed."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from activities.investigation import ProcedureSandboxActivities
from bamboo.investigation.code import with_task_preamble
from bamboo.investigation.procedure_tools import policy_catalog
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.sandbox.contract import ExecuteCodeInput
from policy.code_identity import code_hash
from policy.phases import automatic_allow_set
from tests.investigation.conftest import READ_PROC, READ_PROC_CODE, TASK_ID
from worker.wiring import investigation_activities

# Still read-only and of the same two tools, so it stays replayable: only its identity tells it from the reviewed one.
SWAPPED = READ_PROC_CODE.replace("'jobs': len(j)", "'jobs': len(j), 'seen': t")


def _replays(services):
    """run(run_id, procedure, pins): a run calling ``procedure`` through the worker's own sandbox activity, with
    the procedure hashes its decision pinned; and the activity's tools (closed by the test)."""
    sandbox: ProcedureSandboxActivities = investigation_activities(services).sandbox[0].__self__
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=10))

    async def run(run_id: str, procedure: str, pins: dict[str, str]):
        await sandbox.tools.refresh()
        allowed = automatic_allow_set(policy_catalog(sandbox.tools.list_tools(), sandbox.tools.procedure_code))
        assert procedure in allowed
        code = with_task_preamble(f"return await tools.{procedure}(task_id=task_id)", TASK_ID)
        return await env.run(sandbox.execute_code, ExecuteCodeInput(
            run_id=run_id, code=code, allowed_tools=sorted(allowed), actor="automatic", timeout_s=60,
            procedure_hashes=pins))

    return run, sandbox.tools


async def test_a_procedure_body_changed_after_the_decision_is_not_replayed(services, settings, sim):
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    run, tools = _replays(services)
    try:
        reviewed = {READ_PROC: code_hash(READ_PROC_CODE)}
        first = await run("pinned-as-reviewed", READ_PROC, reviewed)
        assert first.status == "ok" and "seen" not in first.return_value, first.error

        await repo.save(READ_PROC, SWAPPED, "approved", {})  # the row changes after the decision saw the body
        swapped = await run("pinned-swapped", READ_PROC, reviewed)
        assert swapped.status != "ok" and "changed since this run was approved" in (swapped.error or ""), swapped

        again = await run("pinned-to-the-new-body", READ_PROC, {READ_PROC: code_hash(SWAPPED)})
        assert again.status == "ok" and "seen" in again.return_value, again.error
    finally:
        await tools.base.close()


def test_the_workflow_pins_every_procedure_of_the_allow_set_to_the_body_its_catalogue_holds():
    from bamboo.investigation.contract import PolicyContext
    from policy.catalog import ToolCatalog
    from workflows.investigation import pinned_procedures

    context = PolicyContext(session_run="run", catalog=ToolCatalog.build([], {READ_PROC: READ_PROC_CODE,
                                                                             "proc__other": "return 1"}))
    assert pinned_procedures(["get_task_details", READ_PROC], context) == {READ_PROC: code_hash(READ_PROC_CODE)}
    assert pinned_procedures(["get_task_details"], context) == {}


def test_the_workflow_holds_each_run_to_the_tools_its_decision_judged_read_only():
    from bamboo.investigation.contract import PolicyContext
    from policy.catalog import ToolCatalog, ToolFacts
    from workflows.investigation import judged_read_only

    catalog = ToolCatalog.build([ToolFacts(name="get_task_details", read_only=True),
                                 ToolFacts(name="kill_task", read_only=False),
                                 ToolFacts(name="add", read_only=True, origin="external"),
                                 ToolFacts(name=READ_PROC, read_only=True, origin="procedure")],
                                {READ_PROC: READ_PROC_CODE})
    context = PolicyContext(session_run="run", catalog=catalog)
    assert judged_read_only(["get_task_details", "kill_task", "add", READ_PROC, "unknown"], context) == [
        "get_task_details", "add"]


OUTER = "proc__get_task_details__proc_nested"
OUTER_CODE = (f"s = await tools.{READ_PROC}(task_id=task_id)\n"
              "t = await tools.get_task_details(task_id=task_id)\nreturn {'inner': s, 'status': t['status']}")


def test_the_workflow_pins_the_procedures_a_procedure_calls_too():
    from bamboo.investigation.contract import PolicyContext
    from policy.catalog import ToolCatalog
    from workflows.investigation import pinned_procedures

    context = PolicyContext(session_run="run", catalog=ToolCatalog.build([], {READ_PROC: READ_PROC_CODE,
                                                                             OUTER: OUTER_CODE}))
    assert pinned_procedures([OUTER], context) == {OUTER: code_hash(OUTER_CODE), READ_PROC: code_hash(READ_PROC_CODE)}


async def test_a_procedure_called_by_a_procedure_is_held_to_the_body_the_review_saw(services, settings, sim):
    """Only the procedures the code calls itself were pinned: one they call in turn, rewritten after the review
    (still read-only, so still replayable), ran a body nobody reviewed, and its result steered the approved code."""
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    await repo.save(OUTER, OUTER_CODE, "approved", {})
    run, tools = _replays(services)
    reviewed = {OUTER: code_hash(OUTER_CODE), READ_PROC: code_hash(READ_PROC_CODE)}
    try:
        first = await run("nested-as-reviewed", OUTER, reviewed)
        assert first.status == "ok" and "seen" not in str(first.return_value), first.error
        await repo.save(READ_PROC, SWAPPED, "approved", {})  # the inner row changes after the review
        swapped = await run("nested-swapped", OUTER, reviewed)
        assert swapped.status != "ok" and "changed since this run was approved" in (swapped.error or ""), swapped
    finally:
        await tools.base.close()


def test_a_procedure_without_stored_code_when_reviewed_is_pinned_as_absent():
    """A nested procedure with no row at review time was left out of the pins, so a body written afterwards
    replayed unseen (the review showed it missing)."""
    from bamboo.investigation.contract import PolicyContext
    from policy.catalog import ToolCatalog
    from policy.procedures import ABSENT_PROCEDURE
    from workflows.investigation import pinned_procedures

    outer = "s = await tools.proc__later(task_id=task_id)\nreturn s"
    context = PolicyContext(session_run="run", catalog=ToolCatalog.build([], {OUTER: outer}))
    assert pinned_procedures([OUTER, "proc__gone"], context) == {
        OUTER: code_hash(outer), "proc__later": ABSENT_PROCEDURE, "proc__gone": ABSENT_PROCEDURE}


async def test_a_pinned_run_replays_no_procedure_its_review_did_not_see():
    from bamboo.investigation.procedure_tools import PinnedProcedures

    class _Untouched:
        async def replay(self, *args, **kwargs):
            raise AssertionError("replayed")

        async def call_tool(self, *args, **kwargs):
            raise AssertionError("called")

    pinned = PinnedProcedures(_Untouched(), {OUTER: code_hash(OUTER_CODE)})  # type: ignore[arg-type]
    result = await pinned.call_tool("proc__unseen", {})
    assert not result.ok and "not a procedure this run's review saw" in (result.error or "")


INVENTORY = "proc__inventory"
INVENTORY_CODE = ("a = await tools.db_read(key='k')\nb = await tools.get_task_details(task_id=task_id)\n"
                  "return {'a': a, 'b': b}")


def _spec(name: str):
    from bamboo.tools.model import ToolSpec

    return ToolSpec(name=name, description="reads", input_schema={"type": "object"}, read_only=True)


def test_a_run_carries_the_reviews_names_for_the_tools_its_procedures_call():
    from bamboo.investigation.contract import PolicyContext
    from policy.catalog import ToolCatalog, ToolFacts
    from workflows.investigation import run_tool_names

    catalog = ToolCatalog.build([ToolFacts(name="db-read", read_only=True),
                                 ToolFacts(name="get_task_details", read_only=True),
                                 ToolFacts(name=INVENTORY, origin="procedure")], {INVENTORY: INVENTORY_CODE})
    names = run_tool_names([INVENTORY], PolicyContext(session_run="run", catalog=catalog))
    assert names == {INVENTORY: INVENTORY, "db_read": "db-read", "get_task_details": "get_task_details"}


async def test_a_replayed_body_maps_its_names_as_the_review_did():
    """A tool another server lists since the review (`db_read`) took the name the review mapped to `db-read`
    inside a pinned procedure's body: its stub and allow-set were built over the replay-time catalogue."""
    from bamboo.audit import MemoryAuditSink, MemoryBlobSink
    from bamboo.investigation.procedure_tools import PinnedProcedures, ProcedureToolCaller
    from bamboo.sandbox.contract import SandboxRunResult

    class _Base:
        def list_tools(self):
            return [_spec("db-read"), _spec("db_read"), _spec("get_task_details")]  # db_read: listed since

    class _Repo:
        async def approved_code(self):
            return {INVENTORY: INVENTORY_CODE}

    class _Capture:
        seen: dict = {}

        async def execute(self, **kwargs):
            self.seen = kwargs
            return SandboxRunResult(run_id=kwargs["run_id"], status="ok", isolation="bwrap", return_value={})

    tools = ProcedureToolCaller(_Base(), _Repo(), None, MemoryAuditSink(), MemoryBlobSink(),  # type: ignore[arg-type]
                                allow_mutating_autorun=True)
    capture = _Capture()
    tools._executor = capture  # type: ignore[assignment]
    reviewed = {"db_read": "db-read", "get_task_details": "get_task_details"}
    result = await PinnedProcedures(tools, {INVENTORY: code_hash(INVENTORY_CODE)}, reviewed).call_tool(
        INVENTORY, {"task_id": 1})
    assert result.ok, result.error
    assert capture.seen["tool_names"] == reviewed
    assert capture.seen["allowed_tools"] == frozenset({"db-read", "get_task_details"})
