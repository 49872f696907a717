"""A run decided with a tool read-only is refused where that tool may change state.

The review and the run may see different catalogues: another worker's, or an external server that dropped
while another configured server offers the same name (the same server configured twice, read-only
credentials first). Before, the bridge checked only that the name was in the allow-set, and an unattended
run sent a call reviewed as read-only to the server that may change state.
"""

from __future__ import annotations

import pytest

from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.errors import SandboxRefused
from bamboo.sandbox.service import CodeExecutor
from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec

WRITES = ToolSpec(name="add", description="add, through the server with write credentials", read_only=False,
                  origin=ToolOrigin.EXTERNAL, server="rw")
PROCEDURE = ToolSpec(name="proc__status", description="a stored procedure", read_only=False,
                     origin=ToolOrigin.PROCEDURE)


class _NoRunner:
    """Refused before anything runs: a run that got this far would fail the test."""

    isolation = "bwrap"

    async def run(self, *args, **kwargs):
        raise AssertionError("the run started")


class _Caller:
    def list_tools(self) -> list[ToolSpec]:
        return [WRITES, PROCEDURE]

    async def call_tool(self, name: str, arguments: dict) -> ToolResult:
        raise AssertionError("a tool was called")


def _executor() -> CodeExecutor:
    return CodeExecutor(runner=_NoRunner(), caller=_Caller(), audit=MemoryAuditSink(),  # type: ignore[arg-type]
                        blobs=MemoryBlobSink())


@pytest.mark.parametrize("phase, judged", [("automatic", frozenset()), ("interactive", frozenset({"add"}))])
async def test_a_tool_judged_read_only_that_may_now_change_state_refuses_the_run(phase, judged) -> None:
    with pytest.raises(SandboxRefused, match="decided with add read-only"):
        await _executor().execute(run_id="r1", code="return await tools.add(a=1, b=2)", allowed_tools=frozenset({"add"}),
                                  phase=phase, read_only_tools=judged)


async def test_a_tool_the_decision_knew_may_change_state_and_procedures_are_not_refused_so() -> None:
    """State-changing code a person approved runs with its state-changing tools; a stored procedure is held to
    its reviewed body by hash instead. (The stand-in runner then says the run started: that is the pass.)"""
    for allowed in ({"add"}, {"proc__status"}):
        with pytest.raises(AssertionError, match="the run started"):
            await _executor().execute(run_id="r2", code="return 1", allowed_tools=frozenset(allowed),
                                      phase="interactive", read_only_tools=frozenset(allowed - {"add"}))
