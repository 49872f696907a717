"""A resolved incident as operators hand it over: task data, the email thread, logs, and optionally
a reviewed resolution record.

The reviewed record is what a human wrote when triaging the ticket. When present it is the truth
for Cause / Resolution / Procedure, so a knowledge base can be built without a capable LLM.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Postgres `bigint` and Temporal's Int search attributes are signed 64-bit: a larger id cannot be
# stored or indexed, and Temporal retries a workflow task that tries to forever.
MAX_TASK_ID = 2**63 - 1

# A PanDA task id wherever one crosses a boundary: a real int (JSON `true` is not task 1), positive,
# within 64 bits.
TaskId = Annotated[int, Field(strict=True, ge=1, le=MAX_TASK_ID)]


def task_id_problem(value: Any) -> str | None:
    """Why `value` cannot be a PanDA task id, or None when it can (None itself is "no id")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, got {value!r}"[:120]
    if not 1 <= value <= MAX_TASK_ID:
        return f"{value} is out of range: task ids run from 1 to {MAX_TASK_ID} (64-bit)"[:160]
    return None


# A task status names the incident's graph (`panda:<id>:<status>`), the analysis workflow
# (`analyze:<id>:<status>`; Temporal refuses ids over 1000 characters) and a clue node
# (`TaskStatus<Status>`; the store's names stop at 300). PanDA's statuses are single words (broken,
# exhausted, toretry): one bound here keeps every one of those within its limit, wherever a task enters.
MAX_STATUS_CHARS = 64
STATUS_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")


def status_problem(value: Any) -> str | None:
    """Why `value` cannot be a task status, or None when it can (None and "" are "no status")."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if len(value) > MAX_STATUS_CHARS:
        return (f"is {len(value)} characters long, over the {MAX_STATUS_CHARS}-character limit for a task status "
                "(PanDA's are single words such as broken or exhausted)")
    if not STATUS_PATTERN.fullmatch(value):
        return (f"{value!r} is not a task status: letters, digits, '_' and '-' only, starting with a letter "
                "(PanDA's are single words such as broken or exhausted)")
    return None


def task_problem(task: dict[str, Any]) -> str | None:
    """The one check of a task's identifying fields wherever a task enters (an incident, `bamboo analyze`,
    the bot, the console): `field problem`, or None when the task can be named and routed."""
    problem = task_id_problem(task.get("jediTaskID"))
    if problem:
        return f"jediTaskID {problem}"
    problem = status_problem(task.get("status"))
    if problem:
        return f"status {problem}"
    return None


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
    def _task_fields_are_usable(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The task id and status name the incident's graph (`panda:<id>:<status>`), its search
        attribute and its status clue, so they must be what PanDA would send (`task_problem`)."""
        problem = task_problem(v)
        if problem:
            raise ValueError(f"task_data.{problem}")
        return v

    @model_validator(mode="after")
    def _has_something_to_learn(self) -> "Incident":
        """`{}` is not an incident: with no task data, email, logs or resolution record there is
        nothing to extract, and storing it would only add an empty graph."""
        if not (self.task_data or self.email_text.strip() or self.task_logs or self.resolution_record):
            raise ValueError("nothing to learn from: an incident needs task_data, email_text, task_logs "
                             "or a resolution_record")
        return self

    def graph_id(self) -> str:
        """Deterministic: the same incident always lands on the same graph."""
        tid = self.task_data.get("jediTaskID")
        status = self.task_data.get("status")
        if tid is not None:
            return f"panda:{tid}:{status or 'unknown'}"
        return f"incident:{self.incident_id}"


class IncidentSource(BaseModel):
    """Where one incident lives: a JSON file, or one line of a JSONL file (1-based). Beside `Incident` because
    both the reader (`bamboo/ingest.py`) and the populate contract name it, and neither may import the other."""

    path: str
    line: int | None = None
    offset: int | None = Field(default=None, description="byte offset of the line in a JSONL file: a reader seeks "
                               "to it instead of scanning the file up to its line, once per incident")

    def label(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path
