"""A resolved incident as operators hand it over: task data, the email thread, logs, and optionally
a reviewed resolution record.

The reviewed record is what a human wrote when triaging the ticket. When present it is the truth
for Cause / Resolution / Procedure, so a knowledge base can be built without a capable LLM.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ResolutionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: str = Field(min_length=3, description="Short cause label, e.g. 'Insufficient memory request'")
    cause_detail: str = ""
    resolution: str = Field(min_length=3)
    resolution_steps: list[str] = Field(default_factory=list)
    procedure: list[str] = Field(default_factory=list, description="Investigation steps, in order")
    reviewed_by: str | None = None


class Incident(BaseModel):
    """One resolved incident file (``examples/incidents/*.json``)."""

    model_config = ConfigDict(extra="forbid")

    incident_id: str = Field(min_length=1, max_length=200)
    task_data: dict[str, Any] = Field(default_factory=dict)
    email_text: str = ""
    task_logs: dict[str, str] = Field(default_factory=dict)
    external_data: dict[str, Any] = Field(default_factory=dict)
    resolution_record: ResolutionRecord | None = None
    # Hand-written expectations used by the tests; never read by the pipeline.
    expected: dict[str, Any] | None = None

    @field_validator("task_data")
    @classmethod
    def _task_id_is_int(cls, v: dict[str, Any]) -> dict[str, Any]:
        tid = v.get("jediTaskID")
        if tid is not None and not isinstance(tid, int):
            raise ValueError("task_data.jediTaskID must be an integer")
        return v

    def graph_id(self) -> str:
        """Deterministic: the same incident always lands on the same graph."""
        tid = self.task_data.get("jediTaskID")
        status = self.task_data.get("status")
        if tid is not None:
            return f"panda:{tid}:{status or 'unknown'}"
        return f"incident:{self.incident_id}"
