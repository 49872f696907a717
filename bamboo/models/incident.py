"""A resolved incident as operators hand it over: task data, the email thread, logs, and optionally
a reviewed resolution record.

The reviewed record is what a human wrote when triaging the ticket. When present it is the truth
for Cause / Resolution / Procedure, so a knowledge base can be built without a capable LLM.
"""

from __future__ import annotations

import re
import unicodedata
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


def canonical_status(value: str) -> str:
    """The one spelling of a task status that names anything: lower case, letters only. "finished", "Finished",
    "FINISHED", "finished_" and "fin-ished" are one status, so one incident's graph (`panda:<id>:<status>`), its
    analysis's workflow id and its `TaskStatus` clue are each built once, not once per spelling. PanDA's statuses
    are lower-case words; the project keeps no full list of them, so none is refused for missing from one (what
    may be a status at all is `status_problem`'s)."""
    return re.sub(r"[^a-z]", "", value.lower())


def task_problem(task: dict[str, Any]) -> str | None:
    """The one check of a task's identifying fields wherever a task enters (an incident, `bamboo analyze`,
    the bot, the console): `field problem`, or None when the task can be named and routed.

    A usable status is written back into ``task`` in its canonical form (`canonical_status`): this check is
    where every task enters, so every name built from the task after it (graph id, analysis workflow id,
    result file, clue) is built from one spelling."""
    problem = task_id_problem(task.get("jediTaskID"))
    if problem:
        return f"jediTaskID {problem}"
    status = task.get("status")
    problem = status_problem(status)
    if problem:
        return f"status {problem}"
    if isinstance(status, str) and status and canonical_status(status) != status:
        task["status"] = canonical_status(status)
    return None


# Labels become node names (Cause, Resolution, Procedure), and two labels that differ in one look-alike letter
# are two nodes a reader cannot tell apart: "Wаlltime request too short" with a Cyrillic "а" stood beside the
# real cause, with its own resolution, in every front end. A word is one script; these are the scripts whose
# letters pass for each other.
_LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")
_WORD = re.compile(r"\w+")


def fold_label(text: str) -> str:
    """``text`` in Unicode's compatibility form (NFKC: a full-width "Ｗ" is "W") without format characters
    (category Cf: zero-width spaces and joiners, direction marks), which print as nothing."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text) if unicodedata.category(ch) != "Cf")


def label_script_problem(text: str) -> str | None:
    """Why ``text`` cannot be a label, or None: a word of it mixes Latin, Cyrillic or Greek letters (read
    after `fold_label`), which is how a look-alike of a stored label is spelled."""
    for word in _WORD.findall(fold_label(text)):
        scripts: dict[str, str] = {}
        for ch in word:
            script = unicodedata.name(ch, "").split(" ")[0]
            if ch.isalpha() and script in _LOOKALIKE_SCRIPTS:
                scripts.setdefault(script, ch)
        if len(scripts) > 1:
            odd = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch)}" for s, ch in scripts.items() if s != "LATIN")
            return (f"the word {word[:40]!r} mixes {' and '.join(sorted(scripts)).lower()} letters ({odd}); "
                    "retype it in one script")
    return None


class ResolutionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: str = Field(min_length=3, description="Short cause label, e.g. 'Insufficient memory request'")
    cause_detail: str = ""
    resolution: str = Field(min_length=3)
    resolution_steps: list[str] = Field(default_factory=list)
    procedure: list[str] = Field(default_factory=list, description="Investigation steps, in order")
    reviewed_by: str | None = None

    @field_validator("cause", "resolution")
    @classmethod
    def _one_script_a_word(cls, v: str) -> str:
        """The cause and resolution become nodes by their wording: a look-alike letter would make a second node
        (`label_script_problem`)."""
        problem = label_script_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("procedure")
    @classmethod
    def _steps_one_script_a_word(cls, v: list[str]) -> list[str]:
        for i, step in enumerate(v):
            problem = label_script_problem(step)
            if problem:
                raise ValueError(f"step {i + 1}: {problem}")
        return v


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
        attribute and its status clue, so they must be what PanDA would send (`task_problem`, which also puts
        the status in its canonical form)."""
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
            return f"panda:{tid}:{canonical_status(status) if isinstance(status, str) and status else 'unknown'}"
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
