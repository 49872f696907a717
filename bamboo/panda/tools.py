"""The built-in PanDA tools: specs the LLM sees, and the handlers that answer them.

Each handler returns plain data (an empty value means "looked, found nothing") or raises a typed
``PandaError`` (meaning "could not look", or "PanDA said no"); the toolbox turns those into ``ToolResult``s
so they are never confused. ``task_id`` is an explicit argument of every schema: the caller always says
which task. The state-changing tools say what PanDA really did: it *registered* a command that JEDI runs
minutes later; with ``wait_s`` they poll the task's status for the change, within that bound.

Whatever walks an answer whose size PanDA decides (thousands of jobs, two megabytes of log) runs in the
offload pool with a budget (``_off_loop``), never on the worker's event loop, which belongs to Temporal.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from bamboo.offload import BudgetExceeded, in_thread
from bamboo.panda.client import PandaClient
from bamboo.panda.errors import LogHostNotAllowed, PandaError, PandaNotFound
from bamboo.panda.logs import compare_logs, summarize_log
from bamboo.tools.model import ToolSpec

Handler = Callable[[PandaClient, dict[str, Any]], Awaitable[Any]]

FAILED_STATES = {"failed", "cancelled", "closed"}
SUCCESS_TASK_STATES = {"done", "finished"}
ERROR_FIELDS = ("pilotErrorDiag", "exeErrorDiag", "ddmErrorDiag", "taskBufferErrorDiag", "brokerageErrorDiag")
SCOUT_FIELDS = (
    "PandaID", "computingSite", "jobStatus", "pilotErrorCode", "pilotErrorDiag", "exeErrorCode", "exeErrorDiag",
    "transExitCode", "processingType", "cpuConsumptionTime", "jobDuration", "extendedProdSourceLabel",
    "maxPSS", "minRamCount", "actualCoreCount", "memory_leak",
)
CHAIN_FIELDS = ("jediTaskID", "status", "parent_tid", "attemptNr", "transUses", "modificationTime")
# Where a kill or retry leaves the task once JEDI has acted (what wait_s polls for).
SETTLED_AFTER = {"kill": {"aborted", "aborting", "toabort", "broken"}, "retry": {"ready", "running", "scouting", "retrying"}}
MAX_WAIT_S = 600
DATASET_FILES_SHOWN = 20
SIMILARITY_KEYS = ("userName", "prodSourceLabel", "processingType", "transUses", "transHome", "architecture")
LINKED_LOG_CHARS = 20_000
_HREF_RE = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.I)
# Walking up to this many items (jobs, tasks, files) costs well under a millisecond: done inline, where a
# hand-off to a thread would cost more. Anything larger, and every log summary, runs in the offload pool.
INLINE_ITEMS = 200
# errorDialog is 255 characters in JEDI's table; a longer one (the simulator, a changed schema) is scanned
# for links in the offload pool.
INLINE_DIALOG_CHARS = 4096
REDUCE_BUDGET_S = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class BuiltinTool:
    spec: ToolSpec
    handler: Handler


def _task_schema(extra: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"task_id": {"type": "integer", "minimum": 1, "description": "jediTaskID of the task"}}
    props.update(extra or {})
    return {"type": "object", "properties": props, "required": ["task_id", *(required or [])], "additionalProperties": False}


def _read(name: str, description: str, schema: dict[str, Any], handler: Handler) -> BuiltinTool:
    spec = ToolSpec(name=name, description=description, input_schema=schema, read_only=True, external_access=True)
    return BuiltinTool(spec, handler)


def _write(name: str, description: str, schema: dict[str, Any], handler: Handler) -> BuiltinTool:
    spec = ToolSpec(name=name, description=description, input_schema=schema, read_only=False, external_access=True)
    return BuiltinTool(spec, handler)


async def _off_loop(fn: Callable[..., T], *args: Any, inline: bool = False, what: str) -> T:
    """``fn(*args)`` in the offload pool within ``REDUCE_BUDGET_S`` (``inline`` when the caller knows the
    input is small); past the budget a one-line ``PandaError`` naming ``what``."""
    if inline:
        return fn(*args)
    try:
        return await in_thread(fn, *args, budget_s=REDUCE_BUDGET_S, what=what)
    except BudgetExceeded as exc:
        raise PandaError(str(exc)) from None


# --- handlers ---------------------------------------------------------------------------------


async def get_task_details(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    return await client.get_task(args["task_id"])


async def get_retry_chain(client: PandaClient, args: dict[str, Any]) -> list[dict[str, Any]]:
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    task_id: int | None = args["task_id"]
    while task_id is not None and task_id not in seen and len(chain) <= args["max_depth"]:
        seen.add(task_id)
        try:
            task = await client.get_task(task_id)
        except PandaNotFound:
            if not chain:
                raise
            chain.append({"jediTaskID": task_id, "missing": True})
            break
        entry = {k: task.get(k) for k in CHAIN_FIELDS}
        entry["errorDialog"] = (task.get("errorDialog") or "")[:500]
        chain.append(entry)
        parent = task.get("parent_tid")
        task_id = parent if isinstance(parent, int) and parent > 0 and parent != task_id else None
    return chain


def _top_errors(jobs: list[dict[str, Any]], limit: int = 10) -> list[dict[str, Any]]:
    counts: Counter[tuple[str, str]] = Counter()
    for job in jobs:
        if job.get("jobStatus") not in FAILED_STATES:
            continue
        for field in ERROR_FIELDS:
            diag = job.get(field)
            if diag:
                counts[(field, str(diag)[:300])] += 1
    return [{"field": f, "diag": d, "count": n} for (f, d), n in counts.most_common(limit)]


async def get_task_jobs_summary(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    jobs = await client.get_job_descriptions(args["task_id"])
    return await _off_loop(_jobs_summary, jobs, inline=len(jobs) <= INLINE_ITEMS, what=f"summarising {len(jobs)} jobs")


def _jobs_summary(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    if not jobs:
        return {}
    failed = [j for j in jobs if j.get("jobStatus") in FAILED_STATES]
    return {
        "total_jobs": len(jobs),
        "status_counts": dict(Counter(str(j.get("jobStatus")) for j in jobs)),
        "top_errors": _top_errors(jobs),
        "failed_job_ids": [j.get("PandaID") for j in failed[:20]],
    }


def _is_scout(job: dict[str, Any]) -> bool:
    return str(job.get("extendedProdSourceLabel") or "").endswith("scout")


async def get_scout_job_details(client: PandaClient, args: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = await client.get_job_descriptions(args["task_id"])
    return await _off_loop(_scout_jobs, jobs, args["max_jobs"], inline=len(jobs) <= INLINE_ITEMS, what=f"picking scout jobs of {len(jobs)}")


def _scout_jobs(jobs: list[dict[str, Any]], max_jobs: int) -> list[dict[str, Any]]:
    picked = [j for j in jobs if _is_scout(j)]
    codes = {j.get("pilotErrorCode") for j in picked}
    for job in jobs:
        if job.get("jobStatus") in FAILED_STATES and job.get("pilotErrorCode") not in codes:
            codes.add(job.get("pilotErrorCode"))
            picked.append(job)
    return [{k: j.get(k) for k in SCOUT_FIELDS if k in j} for j in picked[:max_jobs]]


async def get_task_input_datasets(client: PandaClient, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Each input dataset with its file count, file states and the first files; ``[]`` when it has none."""
    await client.get_task(args["task_id"])  # the datasets call cannot tell "no datasets" from "no task"
    entries = await client.get_datasets_and_files(args["task_id"])
    # inline only when the datasets are few (a task has a handful) and small (a dataset has up to ~1e5 files)
    few = len(entries) <= INLINE_ITEMS and sum(len(e.get("files") or []) for e in entries) <= INLINE_ITEMS
    return await _off_loop(_datasets, entries, inline=few,
                           what=f"counting the files of {len(entries)} datasets")


def _datasets(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for entry in entries:
        files = entry.get("files") or []
        dataset = entry.get("dataset") or {}
        out.append({"name": dataset.get("name"), "id": dataset.get("id"), "n_files": len(files),
                    "file_status": dict(Counter(str(f.get("status")) for f in files)),
                    "files": files[:DATASET_FILES_SHOWN]})
    return out


async def find_similar_successful_tasks(client: PandaClient, args: dict[str, Any]) -> list[dict[str, Any]]:
    task = await client.get_task(args["task_id"])
    since = _days_before(task.get("modificationTime"), args["days_back"])
    # PanDA returns only the caller's own tasks unless the filters name the user; status is a regex filter.
    filters = {"status": "|".join(sorted(SUCCESS_TASK_STATES))}
    if task.get("userName"):
        filters["userName"] = task["userName"]
    candidates = await client.get_tasks_since(since, filters=filters)
    return await _off_loop(_similar, task, candidates, args["n_tasks"], inline=len(candidates) <= INLINE_ITEMS,
                           what=f"matching {len(candidates)} tasks")


def _similar(task: dict[str, Any], candidates: list[dict[str, Any]], n_tasks: int) -> list[dict[str, Any]]:
    wanted = {k: task[k] for k in SIMILARITY_KEYS if task.get(k) not in (None, "")}
    matches = [
        t for t in candidates
        if t.get("status") in SUCCESS_TASK_STATES
        and t.get("jediTaskID") != task.get("jediTaskID")
        and all(t.get(k) == v for k, v in wanted.items())
    ]
    matches.sort(key=lambda t: str(t.get("modificationTime") or ""), reverse=True)
    keep = ("jediTaskID", "taskName", "status", "modificationTime", "site", "ramCount", "coreCount", *SIMILARITY_KEYS)
    return [{k: t.get(k) for k in keep if k in t} for t in matches[:n_tasks]]


def _days_before(timestamp: Any, days: int) -> datetime:
    try:
        moment = datetime.fromisoformat(str(timestamp))
    except ValueError:
        moment = datetime.now()
    return moment - timedelta(days=days)


async def _first_job(client: PandaClient, task_id: int, states: set[str]) -> dict[str, Any] | None:
    jobs = await client.get_job_descriptions(task_id, unsuccessful_only=states == FAILED_STATES)
    return await _off_loop(_first_in, jobs, states, inline=len(jobs) <= INLINE_ITEMS, what=f"looking through {len(jobs)} jobs")


def _first_in(jobs: list[dict[str, Any]], states: set[str]) -> dict[str, Any] | None:
    return next((j for j in jobs if j.get("jobStatus") in states), None)


async def _summary(text: str) -> dict[str, Any]:
    """``summarize_log`` of up to ``MAX_LOG_BYTES`` of log: regular expressions over every line, off the loop."""
    summary = await _off_loop(summarize_log, text, what=f"summarising {len(text)} characters of log")
    return summary.model_dump()


async def get_failed_job_log_summary(client: PandaClient, args: dict[str, Any]) -> dict[str, Any] | None:
    job = await _first_job(client, args["task_id"], FAILED_STATES)
    if job is None:
        return None
    text = await client.get_job_log(job["PandaID"])
    return {"panda_id": job["PandaID"], "summary": await _summary(text)}


async def compare_failed_vs_successful_job_logs(client: PandaClient, args: dict[str, Any]) -> dict[str, Any] | None:
    failed = await _first_job(client, args["task_id"], FAILED_STATES)
    reference = await _first_job(client, args["reference_task_id"], {"finished"})
    if failed is None or reference is None:
        return None
    failed_text = await client.get_job_log(failed["PandaID"])
    ok_text = await client.get_job_log(reference["PandaID"])
    comparison = await _off_loop(compare_logs, failed_text, ok_text,
                                 what=f"comparing logs of {len(failed_text)} and {len(ok_text)} characters")
    return {
        "failed_panda_id": failed["PandaID"],
        "successful_panda_id": reference["PandaID"],
        "comparison": comparison.model_dump(),
    }


# A log file's name as the monitor lists it: ASCII, no path, no dot segment. Not "$": the validator searches,
# and "$" matches before a final line break; "(?![\s\S])" is the end in every regex dialect a client may use.
LOG_FILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?![\s\S])"


async def summarize_job_log(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    jobs = await client.get_job_descriptions(args["task_id"])
    if not await _off_loop(_has_job, jobs, args["panda_id"], inline=len(jobs) <= INLINE_ITEMS, what=f"looking through {len(jobs)} jobs"):
        raise PandaNotFound(f"task {args['task_id']}", f"job {args['panda_id']} is not a job of task {args['task_id']}")
    text = await client.get_job_log(args["panda_id"], args["filename"])
    return {"panda_id": args["panda_id"], "filename": args["filename"], "summary": await _summary(text)}


def _has_job(jobs: list[dict[str, Any]], panda_id: int) -> bool:
    return any(j.get("PandaID") == panda_id for j in jobs)


async def fetch_linked_log_files(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    task = await client.get_task(args["task_id"])
    dialog = str(task.get("errorDialog") or "")
    urls = await _off_loop(_linked_urls, dialog, args["max_files"], inline=len(dialog) <= INLINE_DIALOG_CHARS,
                           what=f"finding links in {len(dialog)} characters of errorDialog")
    if not urls:
        return {}
    logs: dict[str, str] = {}
    refused: dict[str, str] = {}
    failed: dict[str, str] = {}
    for url in urls:
        try:
            logs[url] = (await client.fetch_linked_log(url))[:LINKED_LOG_CHARS]
        except LogHostNotAllowed as exc:
            refused[url] = str(exc)
        except PandaError as exc:
            failed[url] = str(exc)
    return {"logs": logs, "refused": refused, "failed": failed}


def _linked_urls(dialog: str, max_files: int) -> list[str]:
    return list(dict.fromkeys(_HREF_RE.findall(dialog)))[:max_files]


async def _command(client: PandaClient, action: str, args: dict[str, Any]) -> dict[str, Any]:
    """Send the command and say honestly what happened: registered (not done), and, if asked to wait,
    whether the task's status changed within the bound. A refusal raises PandaRefused with PanDA's words."""
    task_id = args["task_id"]
    before = await client.get_task_status(task_id)
    receipt = await (client.kill_task(task_id) if action == "kill" else client.retry_task(task_id))
    result: dict[str, Any] = {
        "task_id": task_id, "action": action, "accepted": True, "registered": True, "message": receipt.message,
        "status_before": before, "status": before, "applied": False,
        "note": "PanDA registered the command; JEDI applies it within minutes, so the status changes later",
    }
    if args["wait_s"] > 0:
        waited = await client.wait_for_status(task_id, SETTLED_AFTER[action], timeout_s=args["wait_s"],
                                              interval_s=min(5.0, max(0.2, args["wait_s"] / 10)))
        result.update(status=waited.status, applied=waited.reached, waited_s=waited.waited_s)
        if not waited.reached:
            result["note"] = (f"registered, but the task is still {waited.status} after {waited.waited_s:.0f} s; "
                              "check again later with get_task_details")
    return result


async def kill_task(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    return await _command(client, "kill", args)


async def retry_task(client: PandaClient, args: dict[str, Any]) -> dict[str, Any]:
    return await _command(client, "retry", args)


_WAIT = {"wait_s": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S, "default": 0,
                    "description": "seconds to poll the task's status for the change (0: do not wait)"}}


def builtin_tools() -> list[BuiltinTool]:
    """The catalogue, in the order a prompt should show it when nothing is selected."""
    return [
        _read("get_task_details", "Full PanDA task record (status, errorDialog, site, ramCount, splitRule, ...). "
              "Use first to see what a task is and why it stopped.", _task_schema(), get_task_details),
        _read("get_retry_chain", "Follow retryID back through earlier attempts of a task: status and errorDialog "
              "of each. Use to see whether a failure repeats across retries.",
              _task_schema({"max_depth": {"type": "integer", "minimum": 1, "maximum": 20, "default": 3}}),
              get_retry_chain),
        _read("get_task_jobs_summary", "Job status counts, the most frequent job error messages, and failed job "
              "ids of a task. Use to see how widespread and uniform failures are.", _task_schema(),
              get_task_jobs_summary),
        _read("get_scout_job_details", "Scout jobs and failed jobs with distinct pilot error codes: site, error "
              "codes, maxPSS memory, wall time, cores. Use for memory, walltime and site problems.",
              _task_schema({"max_jobs": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}}),
              get_scout_job_details),
        _read("get_task_input_datasets", "Input datasets of a task: file count, file states (finished, failed, "
              "missing...) and the first files. Use for missing, empty or unavailable input data.", _task_schema(),
              get_task_input_datasets),
        _read("find_similar_successful_tasks", "Recent finished tasks of the same user, processing type and "
              "release. Use to find a reference task that worked, e.g. before comparing logs.",
              _task_schema({"n_tasks": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                            "days_back": {"type": "integer", "minimum": 1, "maximum": 30, "default": 14}}),
              find_similar_successful_tasks),
        _read("get_failed_job_log_summary", "Summary of the payload log of the first failed job: sections, "
              "error lines, last action, tail. Use to see where and how a job died.", _task_schema(),
              get_failed_job_log_summary),
        _read("compare_failed_vs_successful_job_logs", "Align a failed job log against a finished job log of a "
              "reference task and show where they diverge. Needs reference_task_id (see "
              "find_similar_successful_tasks).",
              _task_schema({"reference_task_id": {"type": "integer", "minimum": 1}}, ["reference_task_id"]),
              compare_failed_vs_successful_job_logs),
        _read("summarize_job_log", "Summary of one job's log file (default payload.stdout). Use when a specific "
              "PandaID is known.",
              _task_schema({"panda_id": {"type": "integer", "minimum": 1},
                            "filename": {"type": "string", "pattern": LOG_FILE_NAME, "default": "payload.stdout"}},
                           ["panda_id"]),
              summarize_job_log),
        _read("fetch_linked_log_files", "Fetch the log files linked from the task's errorDialog (brokerage and "
              "JEDI logs), only from allowlisted PanDA hosts. Use for brokerage or submission failures.",
              _task_schema({"max_files": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}}),
              fetch_linked_log_files),
        _write("kill_task", "Kill a PanDA task (STATE-CHANGING: aborts all its jobs). Only with operator approval. "
               "PanDA registers the kill and JEDI applies it minutes later; wait_s polls for the status change. "
               "A refusal (not the owner, a status that cannot be killed) fails with PanDA's message.",
               _task_schema(_WAIT), kill_task),
        _write("retry_task", "Retry a PanDA task (STATE-CHANGING: resubmits its failed jobs). Only with operator "
               "approval. Registered, then applied by JEDI later (wait_s polls); a refusal fails with PanDA's "
               "message.", _task_schema(_WAIT), retry_task),
    ]
