"""Reusable procedures as ``proc__…`` tools, and the policy's view of the whole catalogue.

``ProcedureToolCaller`` wraps the real tool caller: it lists the raw tools plus every exposable procedure
(approved, at least two tools, read-only as recomputed from its current code unless the deployment opted
in to mutating auto-run), and a call to ``proc__x`` replays x's *stored, reviewed* code through the same
sandbox, with its own bridge. The replay's allow-set is what that code reaches (``replay_allow_set``), so
a procedure can never do more than the code a human approved; the outer run's allow-set decides whether
the procedure may be called at all, so the read-only boundary of an automatic phase composes through any
depth of procedures. Code and exposure are re-read at call time: a procedure changed since the listing
is judged by its new code.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bamboo.audit import AuditSink, BlobSink
from bamboo.investigation.code import with_task_preamble
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolCaller, ToolOrigin, ToolResult, ToolSpec
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_identity import code_hash, short_hash
from policy.phases import Phase, replay_allow_set
from policy.procedures import ABSENT_PROCEDURE, assess_read_only, is_exposable_procedure, is_procedure_name
from policy.signature import ScanConventions, scan_code
from policy.tool_surface import python_names

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 25.0
PROCEDURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task_id": {"type": "integer", "description": "JEDI task id the procedure works on"}},
    "additionalProperties": False,
}


def exposed_procedures(
    raw_specs: Sequence[ToolSpec], procedure_code: Mapping[str, str], allow_mutating_autorun: bool
) -> list[str]:
    flags = {s.name: s.read_only for s in raw_specs}
    return sorted(
        name for name in procedure_code
        if is_exposable_procedure(name, flags, procedure_code, allow_mutating_autorun)
    )


def procedure_spec(name: str, code: str, read_only: bool, summary: str = "") -> ToolSpec:
    tools = ", ".join(scan_code(code).tools)
    text = summary or f"Replays a reviewed procedure that calls {tools}."
    return ToolSpec(
        name=name, description=f"{text} (stored procedure; calls {tools})", input_schema=PROCEDURE_SCHEMA,
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
        """Re-read the approved procedures; the sync ``list_tools`` answers from this snapshot."""
        await self.connect()
        code = await self.repository.approved_code()
        raw = self.base.list_tools()
        flags = {s.name: s.read_only for s in raw}
        names = exposed_procedures(raw, code, self.allow_mutating_autorun)
        self._procedure_code = code
        self._procedure_specs = [
            procedure_spec(n, code[n], assess_read_only(code[n], flags, code).read_only) for n in names
        ]

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
        await self.refresh()
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
        raw = self.raw_tools()
        if name not in exposed_procedures(raw, self._procedure_code, self.allow_mutating_autorun):
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
