"""Build the simulator's world from incident files: tasks, jobs, datasets and job logs.

Tasks come from ``examples/incidents/*.json``, kept to the attributes a JEDI task really has (an incident's
``retryID`` becomes the task's ``parent_tid``; its job counters only size the synthesised jobs); everything
PanDA would know besides the task record (jobs, logs, datasets, earlier attempts, a task that succeeded) is
synthesised deterministically from the task, seeded by its jediTaskID, so every run of the demo and the
tests sees the same world. Rows hold real ``datetime`` values: the server encodes them on the way out.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, overload

from pydantic import ValidationError

from bamboo.models.incident import Incident
from bamboo.panda.simulator.records import job_row, task_row

log = logging.getLogger(__name__)

FIXTURES_DIR = Path(__file__).parent / "fixtures"
REFERENCE_OFFSET = 500_000_000
MAX_JOBS = 60
FAILING_STATES = {"failed", "broken", "exhausted", "aborted", "aborting", "tobroken"}
DEFAULT_TIME = "2026-11-01T12:00:00"
_PILOT_RE = re.compile(r"pilot:(\d+)\s+([^<\n]+)")
_PANDAID_RE = re.compile(r"pandaid=(\d+)", re.I)
_MAXPSS_RE = re.compile(r"maxPSS\s*[=:]?\s*(\d+)\s*MB", re.I)
_TAG_RE = re.compile(r"<[^>]+>")


@dataclass
class Dataset:
    """A JEDI dataset of a task with its files (``{"lfn", "scope", "id", "status"}``, as the API lists them)."""

    dataset_id: int
    name: str
    type: str
    status: str = "ready"
    files: list[dict[str, Any]] = field(default_factory=list)
    n_missing: int = 0

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f["status"] == status)


@dataclass
class World:
    """Everything the simulator serves, keyed the way the endpoints look things up."""

    tasks: dict[int, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    datasets: dict[int, list[Dataset]] = field(default_factory=dict)
    task_params: dict[int, dict[str, Any]] = field(default_factory=dict)
    # DEFT's copy of the task parameters, which task/get_task_parameters reads (JEDI's copy is task_params)
    deft_task_params: dict[int, dict[str, Any]] = field(default_factory=dict)
    job_templates: dict[int, str] = field(default_factory=dict)
    job_metadata: dict[int, Any] = field(default_factory=dict)
    logs: dict[int, dict[str, str]] = field(default_factory=dict)
    skipped_files: dict[str, str] = field(default_factory=dict)

    def add_task(self, task: dict[str, Any], profiles: dict[str, Any], task_logs: dict[str, str] | None = None) -> None:
        row = incident_task_row(task)
        tid = row["jediTaskID"]
        self.tasks[tid] = row
        jobs, logs = synthesise_jobs(task, profiles, task_logs or {})
        self.jobs[tid] = jobs
        for panda_id, files in logs.items():
            self.logs[panda_id] = files
        self.datasets[tid] = synthesise_datasets(task, jobs)
        self.task_params.setdefault(tid, task_params_of(task))

    def job(self, panda_id: int) -> dict[str, Any] | None:
        for jobs in self.jobs.values():
            for job in jobs:
                if job["PandaID"] == panda_id:
                    return job
        return None


@overload
def _as_datetime(value: Any, default: datetime) -> datetime: ...
@overload
def _as_datetime(value: Any, default: None = None) -> datetime | None: ...
def _as_datetime(value: Any, default: datetime | None = None) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=None) if value else default
    except ValueError:
        return default


def incident_task_row(task: dict[str, Any]) -> dict[str, Any]:
    """An incident's task_data as the JEDI task row PanDA would hold."""
    modified = _as_datetime(task.get("modificationTime"), datetime.fromisoformat(DEFAULT_TIME))
    retry_of = task.get("retryID")
    values = {
        **task,
        "modificationTime": modified,
        "creationDate": _as_datetime(task.get("creationDate"), modified - timedelta(days=1)),
        "parent_tid": task.get("parent_tid") or (retry_of if isinstance(retry_of, int) and retry_of > 0 else None),
        "reqID": task.get("reqID") or task["jediTaskID"],
        "attemptNr": task.get("attemptNr", 1),
        "cloud": task.get("cloud") or "WORLD",
        "ramUnit": task.get("ramUnit") or ("MBPerCore" if task.get("ramCount") else None),
    }
    return task_row(values)


# The submission parameters JEDI keeps for every task (its JEDI_TaskParams row), as far as an incident says them.
TASK_PARAM_KEYS = ("taskName", "userName", "vo", "prodSourceLabel", "taskType", "processingType", "transUses",
                   "transHome", "architecture", "ramCount", "ramUnit", "coreCount", "walltime", "site", "cloud",
                   "campaign", "workingGroup", "cliParams")


def task_params_of(task: dict[str, Any]) -> dict[str, Any]:
    """The task parameters the real server holds for every task it serves (``getJediTaskDetails(full=True)``
    and ``get_detailed_info``'s ``raw_task_params`` read them). Only what the incident states: a submission
    command (``cliParams``) is kept when the incident has one, never invented."""
    return {key: task[key] for key in TASK_PARAM_KEYS if task.get(key) not in (None, "")}


def _profile_for(task: dict[str, Any], profiles: dict[str, Any]) -> dict[str, Any]:
    dialog = str(task.get("errorDialog") or "").lower()
    for profile in profiles["profiles"]:
        if any(k in dialog for k in profile["keywords"]):
            return profile
    return profiles["default"]


def _fmt(template: str, values: dict[str, Any]) -> str:
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):
        return template


def _timestamp(task: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(task.get("modificationTime") or DEFAULT_TIME))
    except ValueError:
        return datetime.fromisoformat(DEFAULT_TIME)


def _payload_log(task: dict[str, Any], panda_id: int, start: datetime, failure_lines: list[str] | None) -> str:
    """A payload.stdout shaped like a real one: setup, stage-in, event loop, and either an error or a clean end."""
    release = task.get("transUses") or "Athena-24.0.30"
    steps = [
        f"Starting payload for PandaID={panda_id} jediTaskID={task['jediTaskID']}",
        "=== setup ===",
        f"Setting up release {release} on {task.get('architecture') or 'x86_64-el9-gcc13-opt'}",
        "=== stage-in ===",
        "Transferring 3 input files",
        "Stage-in finished",
        "=== execute ===",
        f"Running {task.get('processingType') or 'reco'} transform",
        "Processed event 1000",
        "Processed event 5000",
    ]
    if failure_lines is None:
        steps += ["Processed event 10000", "Event loop finished", "=== stage-out ===", "Output uploaded",
                  "=== finalize ===", "Payload completed successfully, exit code 0"]
    else:
        steps += failure_lines
    lines = []
    for i, text in enumerate(steps):
        lines.append(f"{(start + timedelta(seconds=37 * i)).isoformat(timespec='seconds')} | {text}")
    return "\n".join(lines) + "\n"


def _log_filename(source: str) -> str:
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in source)
    return name if "." in name else f"{name}.log"


def _job_counts(task: dict[str, Any], rng: random.Random) -> tuple[int, int, int]:
    """(jobs, failed, finished): the task's own counters when it has them, scaled to MAX_JOBS."""
    status = str(task.get("status") or "")
    total = int(task.get("nJobs") or 0)
    if total > 0 and task.get("nJobsFailed") is not None:
        n_jobs = min(total, MAX_JOBS)
        n_failed = min(n_jobs, round(int(task["nJobsFailed"]) * n_jobs / total))
        n_finished = min(n_jobs - n_failed, round(int(task.get("nJobsFinished") or 0) * n_jobs / total))
        if task.get("errorDialog") and n_failed == 0:
            n_failed = 1
        return n_jobs, n_failed, n_finished
    n_jobs = min(total or rng.randint(12, 40), MAX_JOBS)
    if status in FAILING_STATES:
        n_failed = max(1, round(n_jobs * rng.uniform(0.6, 0.9)))
    elif task.get("errorDialog"):
        n_failed = max(1, round(n_jobs * rng.uniform(0.2, 0.4)))
    else:
        n_failed = 0
    n_failed = min(n_failed, n_jobs - 1) if n_jobs > 1 else n_failed
    return n_jobs, n_failed, n_jobs - n_failed


def _failure_of(task: dict[str, Any], profile: dict[str, Any]) -> tuple[int, str]:
    """The pilot code and message: quoted from the errorDialog when it has them, else from the profile."""
    match = _PILOT_RE.search(str(task.get("errorDialog") or ""))
    if match:
        return int(match.group(1)), _TAG_RE.sub("", match.group(2)).strip()
    return int(profile["pilotErrorCode"]), profile["pilotErrorDiag"]


def _is_payload_log(source: str) -> bool:
    return source.lower().replace("_", ".") in {"payload.stdout", "payload"}


def synthesise_jobs(
    task: dict[str, Any], profiles: dict[str, Any], task_logs: dict[str, str]
) -> tuple[list[dict[str, Any]], dict[int, dict[str, str]]]:
    tid = task["jediTaskID"]
    rng = random.Random(tid)
    profile = _profile_for(task, profiles)
    dialog = str(task.get("errorDialog") or "")
    if profile.get("no_jobs") and str(task.get("status") or "") in FAILING_STATES:
        return [], {}
    n_jobs, n_failed, n_finished = _job_counts(task, rng)
    code, diag_template = _failure_of(task, profile)
    ram_mb = int(task.get("ramCount") or 2000)
    quoted_pss = _MAXPSS_RE.search(dialog)
    site = task.get("site") or "SIM-SITE-A"
    walltime_s = int(task.get("walltime") or 86400)
    label = task.get("prodSourceLabel") or "managed"
    start = _timestamp(task) - timedelta(hours=6)
    named = _PANDAID_RE.search(dialog)
    first_id = int(named.group(1)) if named else tid * 1000
    payload_log = next((text for source, text in task_logs.items() if _is_payload_log(source)), None)
    jobs: list[dict[str, Any]] = []
    logs: dict[int, dict[str, str]] = {}
    for i in range(n_jobs):
        panda_id = first_id + i
        failed = i < n_failed
        state = "failed" if failed else ("finished" if i < n_failed + n_finished else "cancelled")
        if failed and quoted_pss and profile["name"] == "memory":
            max_pss_mb = int(int(quoted_pss.group(1)) * rng.uniform(0.9, 1.0))
        else:
            lo, hi = profile["pss_factor"] if failed else (0.4, 0.7)
            max_pss_mb = int(ram_mb * rng.uniform(lo, hi))
        values = {"max_pss_mb": max_pss_mb, "ram_mb": ram_mb, "site": site, "walltime_s": walltime_s}
        duration_s = rng.randint(900, 30000)
        ended = start + timedelta(minutes=7 * i) + timedelta(seconds=duration_s)
        scout = i < min(3, max(1, n_jobs // 4))
        job = job_row({
            "PandaID": panda_id,
            "jediTaskID": tid,
            "jobName": f"{task.get('taskName') or tid}.{i}",
            "jobStatus": state,
            "attemptNr": 1,
            "computingSite": site,
            "prodSourceLabel": label,
            "prodUserName": task.get("userName"),
            "specialHandling": "sj" if scout else None,
            "processingType": task.get("processingType"),
            "pilotErrorCode": code if failed else 0,
            "pilotErrorDiag": _fmt(diag_template, values) if failed else None,
            "exeErrorCode": profile["transExitCode"] if failed else 0,
            "transExitCode": str(profile["transExitCode"] if failed else 0),
            "maxPSS": max_pss_mb * 1024,
            "minRamCount": ram_mb,
            "minRamUnit": "MB",
            "coreCount": int(task.get("coreCount") or 1),
            "actualCoreCount": int(task.get("coreCount") or 1),
            "cpuConsumptionTime": rng.randint(600, 20000),
            "memory_leak": rng.randint(0, 900) if failed and profile["name"] == "memory" else rng.randint(0, 40),
            "creationTime": start + timedelta(minutes=7 * i) - timedelta(minutes=10),
            "startTime": None if state == "cancelled" else start + timedelta(minutes=7 * i),
            "endTime": None if state == "cancelled" else ended,
            "modificationTime": ended,
            "Files": [{"row_ID": panda_id, "PandaID": panda_id, "lfn": f"{task.get('taskName') or tid}.input.{i + 1}.root",
                       "type": "input", "dataset": f"{task.get('taskName') or f'task{tid}'}.input", "status": "ready",
                       "scope": "sim", "jediTaskID": tid, "datasetID": tid * 10 + 1, "fileID": panda_id}],
        })
        jobs.append(job)
        if state == "cancelled":
            continue
        failure_lines = None
        if failed:
            failure_lines = [_fmt(line, values) for line in profile["log_lines"]]
            failure_lines.append(f"pilot error {code}: {job['pilotErrorDiag']}")
        files = {"payload.stdout": _payload_log(task, panda_id, start + timedelta(minutes=7 * i), failure_lines)}
        if failed:
            for source, text in task_logs.items():
                files[_log_filename(source)] = text
            if payload_log is not None:
                files["payload.stdout"] = payload_log
        logs[panda_id] = files
    return jobs, logs


def synthesise_datasets(task: dict[str, Any], jobs: list[dict[str, Any]]) -> list[Dataset]:
    """An input dataset whose files went the way the jobs did, and an output dataset (which the default
    dataset types of get_datasets_and_files leave out, as on the server)."""
    tid = task["jediTaskID"]
    rng = random.Random(tid ^ 0x5EED)
    name = task.get("taskName") or f"task{tid}"
    dialog = str(task.get("errorDialog") or "").lower()
    missing = any(k in dialog for k in ("missing", "not found", "no replica", "unavailable"))
    by_job = {f["fileID"]: j["jobStatus"] for j in jobs for f in j.get("Files", [])}
    files = []
    for i, job in enumerate(jobs):
        status = {"finished": "finished", "failed": "failed"}.get(by_job.get(job["PandaID"]) or "", "ready")
        files.append({"lfn": job["Files"][0]["lfn"], "scope": "sim", "id": job["PandaID"], "status": status})
    for i in range(len(files), len(files) + (rng.randint(5, 40) if not jobs else 0)):
        files.append({"lfn": f"{name}.input.{i + 1}.root", "scope": "sim", "id": tid * 1000 + i,
                      "status": "missing" if missing else "ready"})
    n_missing = sum(1 for f in files if f["status"] == "missing")
    return [
        Dataset(tid * 10 + 1, f"{name}.input", "input", "missing" if missing else "ready", files, n_missing),
        Dataset(tid * 10 + 2, f"{name.rstrip('/')}_out/", "output", "defined"),
    ]


def _reference_for(task: dict[str, Any]) -> dict[str, Any]:
    """A sibling that succeeded: same user, release and processing type, two days earlier."""
    ref = copy.deepcopy(task)
    ref["jediTaskID"] = task["jediTaskID"] + REFERENCE_OFFSET
    ref["status"] = "done"
    ref["errorDialog"] = ""
    ref["retryID"] = None
    ref["taskName"] = f"{task.get('taskName') or 'task'}.reference"
    ref["modificationTime"] = (_timestamp(task) - timedelta(days=2)).isoformat(timespec="seconds")
    quoted_pss = _MAXPSS_RE.search(str(task.get("errorDialog") or ""))
    if quoted_pss:  # it succeeded because it asked for enough memory
        needed = int(quoted_pss.group(1)) * 1.25
        ref["ramCount"] = max(int(task.get("ramCount") or 0), int(-(-needed // 500) * 500))
    return ref


def _parent_for(task: dict[str, Any]) -> dict[str, Any]:
    """The earlier attempt named by retryID, failing the same way (a retry that did not help)."""
    parent = copy.deepcopy(task)
    parent_id = task["retryID"]
    parent["jediTaskID"] = parent_id
    parent["retryID"] = None
    # The parent's errorDialog links to its own jobs, not the child's (PandaIDs must stay unique).
    dialog = str(parent.get("errorDialog") or "")
    dialog = _PANDAID_RE.sub(f"pandaid={parent_id * 1000}", dialog)
    parent["errorDialog"] = re.sub(r"jeditaskid=\d+", f"jeditaskid={parent_id}", dialog, flags=re.I)
    parent["modificationTime"] = (_timestamp(task) - timedelta(days=1)).isoformat(timespec="seconds")
    return parent


def load_profiles(fixtures_dir: Path = FIXTURES_DIR) -> dict[str, Any]:
    return json.loads((fixtures_dir / "error_profiles.json").read_text())


def build_world(incidents_dir: Path, fixtures_dir: Path = FIXTURES_DIR) -> World:
    """Load incidents (skipping, and recording, files that do not parse) plus extra fixture tasks."""
    profiles = load_profiles(fixtures_dir)
    world = World()
    originals: list[dict[str, Any]] = []
    for path in sorted(Path(incidents_dir).glob("*.json")):
        try:
            incident = Incident.model_validate_json(path.read_text())
        except (ValidationError, OSError) as exc:
            world.skipped_files[path.name] = str(exc).splitlines()[0]
            log.warning("panda-sim: skipping %s: %s", path.name, world.skipped_files[path.name])
            continue
        task = copy.deepcopy(incident.task_data)
        if not isinstance(task.get("jediTaskID"), int):
            world.skipped_files[path.name] = "task_data has no integer jediTaskID"
            continue
        world.add_task(task, profiles, incident.task_logs)
        originals.append(task)
    for path in sorted(fixtures_dir.glob("*.json")):
        if path.name == "error_profiles.json":
            continue
        for task in json.loads(path.read_text()).get("tasks", []):
            if task["jediTaskID"] not in world.tasks:
                world.add_task(task, profiles)
    for task in originals:
        ref = _reference_for(task)
        if ref["jediTaskID"] not in world.tasks:
            world.add_task(ref, profiles)
        retry_id = task.get("retryID")
        if isinstance(retry_id, int) and retry_id > 0 and retry_id not in world.tasks:
            world.add_task(_parent_for(task), profiles)
    return world
