"""Reading the tasks to analyse: a PanDA task JSON, or an incident file whose `task_data` is used.

Analysis sees task fields only. When handed an incident file (as the benchmark and the examples are),
its resolution record, email and expected labels are dropped here, before anything else reads them,
so a diagnosis can never peek at the answer.

A task is checked here the way an incident is where it enters populate: the same file rules and strict
JSON (`bamboo.input_files`: no link out of the directory, no FIFO, nesting, NUL, duplicate keys) and the
same bounds on its identifying fields (`bamboo.models.incident.task_problem`), each a one-line error,
before any network call or workflow start (`bamboo analyze`, the bot, the console, analyze-batch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bamboo import input_files
from bamboo.analysis.contract import TaskSource
from bamboo.input_files import InputRejected
from bamboo.models.incident import task_problem

MAX_TASK_FILE_BYTES = 8 * 1024 * 1024


class TaskFileError(ValueError):
    """The file cannot be read as a task; the message says what to fix."""


def task_fields(document: Any, label: str) -> dict[str, Any]:
    """The task's fields from a task or incident document, or `TaskFileError` saying what is wrong."""
    if not isinstance(document, dict):
        raise TaskFileError(f"{label}: expected a JSON object with PanDA task fields, got {type(document).__name__}")
    if isinstance(document.get("task_data"), dict):
        document = document["task_data"]
    if not any(k in document for k in ("jediTaskID", "errorDialog", "status")):
        raise TaskFileError(f"{label}: no task fields found (need at least one of jediTaskID, status, errorDialog)")
    problem = task_problem(document)
    if problem:
        raise TaskFileError(f"{label}: {problem}")
    try:
        input_files.check_values(document)
    except InputRejected as exc:
        raise TaskFileError(f"{label}: {exc}") from None
    return dict(document)


def check_task_id(task_id: Any, label: str = "--task-id") -> int:
    """A task id given on its own (the CLI, the bot, the console), checked before PanDA is asked for it."""
    problem = task_problem({"jediTaskID": task_id})
    if problem or task_id is None:
        raise TaskFileError(f"{label}: {problem or 'a task id is required'}")
    return task_id


def read_task_file(path: str | Path) -> dict[str, Any]:
    """A task (or incident) file: a regular file, a link only within its directory, strict JSON."""
    p = Path(path)
    try:
        with input_files.open_regular(p, within=p.parent) as fh:
            raw = fh.read(MAX_TASK_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TaskFileError(f"{p}: no such file") from None
    except PermissionError:
        raise TaskFileError(f"{p}: not readable (permission denied)") from None
    except InputRejected as exc:
        raise TaskFileError(f"{p}: {exc}") from None
    if len(raw) > MAX_TASK_FILE_BYTES:
        raise TaskFileError(f"{p}: larger than {MAX_TASK_FILE_BYTES // 2**20} MiB; is this really a task file?")
    try:
        document = input_files.parse_json(raw)
    except InputRejected as exc:
        raise TaskFileError(f"{p}: {exc}") from None
    return task_fields(document, str(p))


def list_task_files(path: str | Path) -> list[TaskSource]:
    """Every .json task file of a directory (sorted), with the id and status that name its analysis."""
    p = Path(path)
    if not p.is_dir():
        raise TaskFileError(f"{p}: not a directory; pass a directory of task (or incident) .json files")
    sources = []
    base = p.resolve()
    # Every *.json entry, by its name in the directory (a link is not resolved here: the reader decides
    # whether to follow it). One that is not a regular file in the directory is an item that fails with
    # its reason, not one that silently drops out of the batch.
    for name in sorted(x.name for x in base.iterdir() if x.suffix == ".json"):
        f = base / name
        try:
            task = read_task_file(f)
        except TaskFileError:
            sources.append(TaskSource(path=str(f), task_id=None, status=None))
            continue
        status = task.get("status")
        sources.append(TaskSource(path=str(f), task_id=task.get("jediTaskID"),
                                  status=status if isinstance(status, str) else None))
    if not sources:
        raise TaskFileError(f"{p} holds no .json files")
    return sources
