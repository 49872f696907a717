"""Reading the tasks to analyse: a PanDA task JSON, or an incident file whose `task_data` is used.

Analysis sees task fields only. When handed an incident file (as the benchmark and the examples are),
its resolution record, email and expected labels are dropped here, before anything else reads them,
so a diagnosis can never peek at the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bamboo.analysis.contract import TaskSource
from bamboo.models.incident import task_id_problem

MAX_TASK_FILE_BYTES = 8 * 1024 * 1024


class TaskFileError(ValueError):
    """The file cannot be read as a task; the message says what to fix."""


def task_fields(document: Any, label: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise TaskFileError(f"{label}: expected a JSON object with PanDA task fields, got {type(document).__name__}")
    if isinstance(document.get("task_data"), dict):
        document = document["task_data"]
    if not any(k in document for k in ("jediTaskID", "errorDialog", "status")):
        raise TaskFileError(f"{label}: no task fields found (need at least one of jediTaskID, status, errorDialog)")
    problem = task_id_problem(document.get("jediTaskID"))
    if problem:
        raise TaskFileError(f"{label}: jediTaskID {problem}")
    return dict(document)


def read_task_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise TaskFileError(f"{p}: no such file")
    if p.stat().st_size > MAX_TASK_FILE_BYTES:
        raise TaskFileError(f"{p}: larger than {MAX_TASK_FILE_BYTES // 2**20} MiB; is this really a task file?")
    try:
        document = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFileError(f"{p}: not valid JSON ({exc})") from None
    return task_fields(document, str(p))


def list_task_files(path: str | Path) -> list[TaskSource]:
    """Every .json task file of a directory (sorted), with the id and status that name its analysis."""
    p = Path(path)
    if not p.is_dir():
        raise TaskFileError(f"{p}: not a directory; pass a directory of task (or incident) .json files")
    sources = []
    for f in sorted(x for x in p.iterdir() if x.suffix == ".json" and x.is_file()):
        try:
            task = read_task_file(f)
        except TaskFileError:
            sources.append(TaskSource(path=str(f.resolve()), task_id=None, status=None))
            continue
        status = task.get("status")
        sources.append(TaskSource(path=str(f.resolve()), task_id=task.get("jediTaskID"),
                                  status=status if isinstance(status, str) else None))
    if not sources:
        raise TaskFileError(f"{p} holds no .json files")
    return sources
