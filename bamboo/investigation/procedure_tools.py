"""Reusable procedures as ``proc__…`` tools, and the policy's view of the whole catalogue.

``ProcedureToolCaller`` wraps the real tool caller: it lists the raw tools plus every exposable procedure
(approved, at least two tools, read-only as recomputed from its current code unless the deployment opted
in to mutating auto-run), and a call to ``proc__x`` replays x's *stored, reviewed* code through the same
sandbox, with its own bridge. The replay's allow-set is what that code reaches (``replay_allow_set``), so
a procedure can never do more than the code a human approved; the outer run's allow-set decides whether
the procedure may be called at all, so the read-only boundary of an automatic phase composes through any
depth of procedures. Code and exposure are re-read at call time: a procedure changed since the listing
is judged by its new code.

Judging the store is an AST walk of every approved body, before codegen, policy_context, reuse_candidates and
execute_code and on every ``proc__`` replay: on the event loop it stopped the worker for seconds (500 bodies of
3.7 KB: 7.6 s). It runs off the loop within ``REFRESH_BUDGET_S``, and the verdict of the store as last judged is
kept (``StoreJudgement``): a store unchanged since is not walked again. Any change to a body, a tool's read-only
flag or the setting judges the whole store again, off the loop: simpler than remembering what each verdict read,
at the cost of one full walk per change (stores change when a session is finalised).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bamboo.audit import AuditSink, BlobSink
from bamboo.investigation.code import with_task_preamble
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.offload import BudgetExceeded, in_thread
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolCaller, ToolOrigin, ToolResult, ToolSpec
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash, short_hash
from policy.phases import Phase, replay_allow_set
from policy.procedures import ABSENT_PROCEDURE, assess_read_only, is_exposable, is_procedure_name
from policy.signature import ScanConventions
from policy.tool_surface import python_names

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 25.0
PROCEDURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task_id": {"type": "integer", "description": "JEDI task id the procedure works on"}},
    "additionalProperties": False,
}


# Wall time for judging the store off the loop: codegen and execute_code refresh before they start heartbeating,
# so it stays under their heartbeat timeout (bamboo.contract).
REFRESH_BUDGET_S = 6.0


def exposed_procedures(
    raw_specs: Sequence[ToolSpec], procedure_code: Mapping[str, str], allow_mutating_autorun: bool
) -> list[str]:
    """The procedures offered as tools, sorted (``policy.procedures.is_exposable_procedure``)."""
    return [s.name for s in judge_store(procedure_code, {s.name: s.read_only for s in raw_specs}, allow_mutating_autorun)]


def judge_store(procedure_code: Mapping[str, str], read_only_flags: Mapping[str, bool],
                allow_mutating_autorun: bool) -> list[ToolSpec]:
    """The tool spec of every exposable procedure, sorted by name: one walk of each body gives both whether it
    is exposed and whether it is read-only. Sized by the store: run it off the loop."""
    specs = []
    for name in sorted(procedure_code):
        verdict = assess_read_only(procedure_code[name], read_only_flags, procedure_code)
        if is_exposable(verdict, allow_mutating_autorun):
            specs.append(procedure_spec(name, verdict.signature.tools, verdict.read_only))
    return specs


class StoreJudgement:
    """The store's verdict as last judged, and the digest of everything it was judged from: the bodies, the raw
    tools' read-only flags and the mutating-autorun setting. It is reused only for exactly that input, so a
    read-only verdict (what an unattended run may call) never outlives a body, a nested body or a flag it read.
    A judgement abandoned past its budget still completes in its thread and is kept for the next refresh."""

    def __init__(self) -> None:
        self._last: tuple[str, list[ToolSpec]] | None = None

    def specs(self, procedure_code: Mapping[str, str], read_only_flags: Mapping[str, bool],
              allow_mutating_autorun: bool) -> list[ToolSpec]:
        subject = {"code": dict(procedure_code), "flags": dict(read_only_flags), "mutating": allow_mutating_autorun}
        digest = hashlib.sha256(json.dumps(subject, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()
        last = self._last
        if last is not None and last[0] == digest:
            return last[1]
        specs = judge_store(procedure_code, read_only_flags, allow_mutating_autorun)
        self._last = (digest, specs)
        return specs


def procedure_spec(name: str, tools: Sequence[str], read_only: bool, summary: str = "") -> ToolSpec:
    """A stored procedure as a tool: the tools it calls (its scan's), and whether it is read-only (its walk's)."""
    listed = ", ".join(tools)
    text = summary or f"Replays a reviewed procedure that calls {listed}."
    return ToolSpec(
        name=name, description=f"{text} (stored procedure; calls {listed})", input_schema=PROCEDURE_SCHEMA,
        read_only=read_only, external_access=True, origin=ToolOrigin.PROCEDURE,
    )


def policy_catalog(specs: Sequence[ToolSpec], procedure_code: Mapping[str, str]) -> ToolCatalog:
    """The policy's view: every listed tool's facts, and the current code of every approved procedure."""
    return ToolCatalog.build([ToolFacts.from_spec(s) for s in specs], procedure_code)


class ProcedureToolCaller:
    """A ``ToolCaller``: the raw tools plus exposed procedure tools that replay through the sandbox."""

    def __init__(
        self,
        base: ToolCaller,
        repository: ProcedureRepository,
        runner: SandboxRunner | None,
        audit: AuditSink,
        blobs: BlobSink,
        *,
        allow_mutating_autorun: bool = False,
    ) -> None:
        self.base = base
        self.repository = repository
        self.allow_mutating_autorun = allow_mutating_autorun
        self._executor = (CodeExecutor(runner=runner, caller=self, audit=audit, blobs=blobs)
                          if runner is not None else None)
        self._procedure_code: dict[str, str] = {}
        self._procedure_specs: list[ToolSpec] = []
        self._judgement = StoreJudgement()
        self._connecting: asyncio.Future[Any] | None = None

    async def connect(self) -> None:
        """Connect the external MCP servers once; every caller, concurrent ones included, waits for the one
        connection (the worker starts it when it starts, so the first analysis sees the external tools).

        A flag set before the connection finished let a second caller (an analysis started while the first
        was connecting) read a catalogue without them."""
        if self._connecting is None:
            connect = getattr(self.base, "connect", None)
            if connect is None:
                return
            self._connecting = asyncio.ensure_future(connect())
        await asyncio.shield(self._connecting)

    async def refresh(self) -> None:
        """Re-read the approved procedures and judge them off the loop; the sync ``list_tools`` answers from this
        snapshot. Past ``REFRESH_BUDGET_S`` it raises `BudgetExceeded` (the activity fails with that line; its
        retry finds the judgement the abandoned thread went on to finish) and lists no procedure until a refresh
        succeeds: a body nobody judged is never taken for read-only."""
        await self.connect()
        code = await self.repository.approved_code()
        flags = {s.name: s.read_only for s in self.raw_tools()}
        try:
            specs = await in_thread(self._judgement.specs, code, flags, self.allow_mutating_autorun,
                                    budget_s=REFRESH_BUDGET_S, what=f"judging {len(code)} stored procedures")
        except BudgetExceeded:
            self._procedure_code, self._procedure_specs = code, []
            raise
        self._procedure_code, self._procedure_specs = code, specs

    @property
    def exposed(self) -> list[str]:
        """The procedures the last refresh offers as tools (sorted), judged on the code it read."""
        return [s.name for s in self._procedure_specs]

    @property
    def procedure_code(self) -> dict[str, str]:
        return dict(self._procedure_code)

    def raw_tools(self) -> list[ToolSpec]:
        return [s for s in self.base.list_tools() if not is_procedure_name(s.name)]

    def list_tools(self) -> list[ToolSpec]:
        return [*self.raw_tools(), *self._procedure_specs]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if not is_procedure_name(name):
            return await self.base.call_tool(name, arguments)
        return await self.replay(name, arguments)

    async def replay(self, name: str, arguments: dict[str, Any], expected_hash: str | None = None,
                     pins: Mapping[str, str] | None = None, names: Mapping[str, str] | None = None) -> ToolResult:
        """Run the stored procedure ``name`` in the sandbox; with ``expected_hash``, only if its body still has it.
        ``pins``: the run's procedure hashes, held for the procedures this one calls in turn (PinnedProcedures);
        ``names``: Python name -> tool as the run's review mapped them, for this body's stub and allow-set."""
        try:
            await self.refresh()
        except BudgetExceeded as exc:
            return ToolResult.failure(f"{name} cannot be replayed now: {exc}")
        code = self._procedure_code.get(name)
        if code is None:
            return ToolResult.failure(f"{name} is not an approved stored procedure")
        if expected_hash == ABSENT_PROCEDURE:
            return ToolResult.failure(f"{name} had no stored code when this run was reviewed; ask for it again to "
                                      "review the body it has now")
        if expected_hash is not None and code_hash(code) != expected_hash:
            return ToolResult.failure(
                f"{name} changed since this run was approved (its body is {short_hash(code_hash(code))} now, the "
                f"review saw {short_hash(expected_hash)}); ask for it again to review the new body")
        if self._executor is None:
            return ToolResult.failure(f"{name} cannot be replayed: this worker has no usable sandbox")
        if name not in self.exposed:  # judged by the refresh above, on the code read now
            return ToolResult.failure(
                f"{name} is no longer replayable as a tool: its current code is not a read-only procedure of "
                "at least two tools; run it as reviewed code in an interactive turn instead"
            )
        catalog = policy_catalog(self.list_tools(), self._procedure_code)
        mapping = dict(names) if names is not None else python_names(tool.name for tool in catalog.tools)
        allowed = replay_allow_set(name, Phase.INTERACTIVE, catalog, ScanConventions(python_names=mapping))
        task_id = arguments.get("task_id")
        result = await self._executor.execute(
            run_id=f"replay:{name}:{uuid.uuid4().hex[:12]}",
            code=with_task_preamble(code, task_id if isinstance(task_id, int) else None),
            allowed_tools=allowed,
            timeout_s=REPLAY_TIMEOUT_S,
            actor=f"procedure:{name}",
            # No person approved this body for this call: the replay runs as an unattended run does, every
            # allowed tool held read-only now (and a degraded sandbox, which runs nothing unattended, refuses it).
            phase="automatic",
            tool_names={py: real for py, real in mapping.items() if real in allowed},
            caller=PinnedProcedures(self, pins, names) if pins is not None else None,
        )
        if result.status != "ok":
            return ToolResult.failure(f"{name} failed ({result.status}): {result.error or 'no detail'}")
        return ToolResult.success(result.return_value or {})


class PinnedProcedures:
    """One run's ``ToolCaller``: the stored procedures its review (or policy decision) saw replay only with the
    bodies it saw. A procedure's body is a database row, re-read when it is called; changed between the review
    and the run (by anyone who can write the table, or another session's finalize), the approved call would
    have replayed code nobody reviewed, and with ``allow_mutating_autorun`` code that changes state."""

    def __init__(self, tools: ProcedureToolCaller, hashes: Mapping[str, str],
                 names: Mapping[str, str] | None = None) -> None:
        self.tools, self.hashes = tools, dict(hashes)
        self.names = dict(names) if names is not None else None  # the review's Python names, for replays

    def list_tools(self) -> list[ToolSpec]:
        return self.tools.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name in self.hashes:
            return await self.tools.replay(name, arguments, self.hashes[name], pins=self.hashes, names=self.names)
        if is_procedure_name(name):  # reached only by a route the review did not see: nobody saw its body
            return ToolResult.failure(f"{name} is not a procedure this run's review saw; ask for it in a new turn")
        return await self.tools.call_tool(name, arguments)
