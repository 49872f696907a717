"""The 20 task and job calls of the official client (``pandaclient.Client``), run in a process of their own.

panda-client reads ``PANDA_URL`` / ``PANDA_URL_SSL`` when it is imported, so each target gets a fresh
interpreter (``python -m tests.contract.official_client_calls``) and the answers come back as one JSON
object on stdout: per call, what the official client returned, with datetimes and job objects reduced to
what does not depend on when the seed was loaded. Commands (kill, retry...) go last and leave task
statuses as they are on both targets (the real server has no JEDI; the contract simulator's JEDI waits).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

# (call name, HTTP method and path it uses, a function of the Client module returning its answer)
CALLS: list[tuple[str, str, Any]] = [
    ("getTaskStatus", "GET task/get_status", lambda C: C.getTaskStatus(1001)),
    ("getJediTaskDetails", "GET task/get_details", lambda C: C.getJediTaskDetails({"jediTaskID": 1001}, True, True)),
    ("get_task_details_json", "GET task/get_detailed_info", lambda C: C.get_task_details_json(1001)),
    ("get_parent_detailed_info", "GET task/get_parent_detailed_info", lambda C: C.get_parent_detailed_info(1001)),
    ("getTaskParamsMap", "GET task/get_task_parameters", lambda C: C.getTaskParamsMap(1001)),
    ("getPandaIDsWithTaskID", "GET task/get_job_ids", lambda C: C.getPandaIDsWithTaskID(1001)),
    ("get_job_descriptions", "GET task/get_job_descriptions",
     lambda C: C.get_job_descriptions(1001, unsuccessful_only=True)),
    ("get_files_in_datasets", "GET task/get_datasets_and_files", lambda C: C.get_files_in_datasets(1001)),
    ("get_tasks_detailed_info_since", "GET task/get_tasks_detailed_info_since",
     lambda C: C.get_tasks_detailed_info_since(filters={"status": "running|failed"}, n_tasks=10)),
    ("getFullJobStatus", "POST job/get_description_incl_archive", lambda C: C.getFullJobStatus([9000002, 12345])),
    ("getJobStatus", "POST job/get_description", lambda C: C.getJobStatus([9000003])),
    ("getUserJobMetadata", "GET job/get_metadata_for_analysis_jobs", lambda C: C.getUserJobMetadata(1001)),
    ("killJobs", "POST job/kill", lambda C: C.killJobs([9000002])),
    ("killTask", "POST task/kill", lambda C: (C.killTask(1002), C.killTask(1001), C.killTask(1003))),
    ("finishTask", "POST task/finish", lambda C: (C.finishTask(1001), C.finishTask(1003, soft=True))),
    ("retryTask", "POST task/retry", lambda C: (C.retryTask(1002), C.retryTask(1003), C.retryTask(1001))),
    ("pauseTask", "POST task/pause", lambda C: C.pauseTask(1003, verbose=False)),
    ("resumeTask", "POST task/resume", lambda C: C.resumeTask(1003, verbose=False)),
    ("reactivateTask", "POST task/reactivate", lambda C: C.reactivateTask(1001, verbose=False)),
    ("reload_input", "POST task/reload_input", lambda C: C.reload_input(1001, verbose=False)),
]


def normalise(value: Any) -> Any:
    """JSON-comparable: a datetime is only a datetime; a JobSpec is its attributes; id lists are sorted."""
    if isinstance(value, datetime):
        return "<datetime>"
    if hasattr(value, "_attributes"):  # pandaclient.JobSpec.JobSpec
        return {"JobSpec": {a: normalise(getattr(value, a, None)) for a in value._attributes}}
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [normalise(v) for v in value]
        if items and all(isinstance(i, int) and not isinstance(i, bool) for i in items) and len(items) > 1:
            return sorted(items)  # PandaID lists come in table order on the server
        if items and all(isinstance(i, dict) and "PandaID" in i for i in items):
            return sorted(items, key=lambda i: i["PandaID"])
        return items
    return value


def main() -> None:
    from pandaclient import Client

    answers = {}
    for name, _, call in CALLS:
        try:
            answers[name] = normalise(call(Client))
        except BaseException as exc:  # noqa: BLE001 (the client exits on some errors; record what happened)
            answers[name] = f"raised {type(exc).__name__}: {exc}"
    sys.stdout.write("\n" + json.dumps(answers, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
