"""The tool facts the trust policy needs, in a shape that does not depend on the rest of the project.

The policy package must stay importable inside the Temporal workflow sandbox and free of the project's
service code, so it carries its own small view of a tool instead of importing the shared ``ToolSpec``.
``ToolFacts.from_spec`` accepts anything shaped like one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ToolOriginName = Literal["builtin", "external", "procedure", "command"]


class ToolFacts(BaseModel):
    """One bridged tool as the policy sees it. Absent facts default to the unsafe reading (not read-only)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    read_only: bool = False
    requires_interaction: bool = False
    origin: ToolOriginName = "builtin"

    @classmethod
    def from_spec(cls, spec: Any) -> "ToolFacts":
        """Build from any object with ``name``, ``read_only``, ``requires_interaction`` and ``origin``."""
        origin: Any = getattr(spec, "origin", "builtin")
        return cls(
            name=spec.name,
            read_only=bool(getattr(spec, "read_only", False)),
            requires_interaction=bool(getattr(spec, "requires_interaction", False)),
            origin=getattr(origin, "value", origin),
        )


class ToolCatalog(BaseModel):
    """The tools a run could be bridged to, plus the current stored code of the procedures the decision at hand
    reaches (``policy.procedures.procedure_scope``); a procedure without code here is judged as absent.

    A procedure's own ``read_only`` flag is never consulted: its read-only-ness is recomputed from
    ``procedure_code`` each time, so a procedure whose code changed cannot keep an old verdict.
    """

    model_config = ConfigDict(frozen=True)

    tools: tuple[ToolFacts, ...] = ()
    procedure_code: Mapping[str, str] = Field(default_factory=dict)

    @classmethod
    def build(cls, tools: Iterable[ToolFacts], procedure_code: Mapping[str, str] | None = None) -> "ToolCatalog":
        return cls(tools=tuple(tools), procedure_code=dict(procedure_code or {}))

    def by_name(self) -> dict[str, ToolFacts]:
        return {tool.name: tool for tool in self.tools}

    def read_only_flags(self) -> dict[str, bool]:
        """Declared flags of the non-procedure tools; procedures are left out so nobody can trust theirs."""
        return {tool.name: tool.read_only for tool in self.tools if tool.origin != "procedure"}
