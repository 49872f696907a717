"""The extraction seam: a strategy turns one incident into a knowledge graph.

Workflows never talk to a strategy directly; the accumulate activities pick one by setting, so
another workload system plugs in by adding a strategy, without touching any workflow.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from bamboo.models.graph import KnowledgeGraph, PassageDraft
from bamboo.models.incident import Incident


class ExtractionResult(BaseModel):
    graph: KnowledgeGraph
    passages: list[PassageDraft] = Field(default_factory=list)
    summary: str = ""
    notes: list[str] = Field(default_factory=list, description="what the strategy decided and why (shown in progress)")
    source: str = Field(default="", description="resolution_record | email | none")
    hints: dict[str, Any] | None = Field(
        default=None, description="the strategy's prefetch hints for this incident, when extraction already computed them")


class ExtractionStrategy(Protocol):
    name: str

    def prefetch_hints(self, incident: Incident) -> dict[str, Any]:
        """Cheap deterministic facts gathered before the LLM runs (classified symptom, features)."""
        ...

    async def extract(self, incident: Incident, *, feedback: str = "", exploration: dict[str, Any] | None = None) -> ExtractionResult:
        ...
