"""Incident files for the tests: a memory failure, a brokerage failure with a hostile link, a done task."""

from __future__ import annotations

import json
from pathlib import Path


MEMORY_TASK = 41234567
BROKERAGE_TASK = 41234600
DONE_TASK = 41234700
RUNNING_TASK = 41234800
PARENT_TASK = 41234500

MEMORY_LOG = "\n".join(
    [
        "2026-11-10T08:00:00 | Starting payload",
        "=== setup ===",
        "2026-11-10T08:00:10 | Setting up release Athena-24.0.30",
        "=== execute ===",
        "2026-11-10T08:20:00 | Processed event 5000",
        "2026-11-10T08:21:00 | ERROR: std::bad_alloc while reading event 5012",
        "2026-11-10T08:21:01 | FATAL: payload killed by OOM killer",
    ]
)


def write_incidents(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    incidents = {
        "memory.json": {
            "incident_id": "memory-1",
            "task_data": {
                "jediTaskID": MEMORY_TASK, "status": "failed", "taskName": "user.sim.memory.v1",
                "errorDialog": 'Insufficient memory: maxPSS exceeded ramCount. '
                               '<a href="https://bigpanda.cern.ch/jedilog/41234567.log">log</a>',
                "site": "SIM-SITE-B", "ramCount": 2000, "coreCount": 1, "retryID": PARENT_TASK,
                "userName": "user-a", "prodSourceLabel": "user", "processingType": "panda-client",
                "transUses": "Athena-24.0.30", "modificationTime": "2026-11-10T09:00:00", "nJobs": 20,
            },
            "task_logs": {"payload.stdout": MEMORY_LOG},
        },
        "brokerage.json": {
            "incident_id": "brokerage-1",
            "task_data": {
                "jediTaskID": BROKERAGE_TASK, "status": "broken", "taskName": "user.sim.broker.v1",
                "errorDialog": 'brokerage: no candidate sites. <a href="https://aipanda.cern.ch/cache/jedi/41234600.log">a</a> '
                               '<a href="https://evil.example.org/steal">b</a>',
                "site": "SIM-SITE-C", "ramCount": 4000, "modificationTime": "2026-11-11T09:00:00",
            },
        },
        "running.json": {
            "incident_id": "running-1",
            "task_data": {"jediTaskID": RUNNING_TASK, "status": "running", "taskName": "user.sim.running.v1",
                          "userName": "user-a", "prodSourceLabel": "user", "modificationTime": "2026-11-12T10:00:00"},
        },
        "done.json": {
            "incident_id": "done-1",
            "task_data": {"jediTaskID": DONE_TASK, "status": "done", "taskName": "user.sim.ok",
                          "modificationTime": "2026-11-12T09:00:00"},
        },
    }
    for name, body in incidents.items():
        (directory / name).write_text(json.dumps(body))
    (directory / "broken.json").write_text('{"incident_id": "x", "task_data": {"jediTaskID": "not-an-int"}}')
    return directory


