"""Deterministic routing of PanDA task fields into graph clues.

The same routing serves accumulation and analysis, so a clue extracted from a new task matches the
node a past incident stored. No LLM is involved: discrete keys become features verbatim, continuous
keys are bucketed so near values meet, and user identities are pseudonymised with a keyed HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

from bamboo.extraction.panda.error_classes import classify_error_dialog
from bamboo.models.graph import MAX_NAME, GraphNode
from bamboo.models.incident import canonical_status, status_problem

# The version of the clues this routing names. It is part of every incident's fingerprint
# (bamboo.ingest), so graphs learned under another version are learned again by the next populate
# instead of being skipped as "already learned" with clue names analysis no longer produces.
# Bump it with any change to a clue's name or to which clues a task yields.
# 3: a status clue is named from the canonical status (`canonical_status`), and an incident links at most
# `MAX_JOB_CODES` pilot codes and `MAX_JOB_SITES` sites from its job records.
ROUTING_VERSION = 3

DISCRETE_TASK_KEYS = (
    "prodSourceLabel", "vo", "coreCount", "taskType", "processingType", "taskPriority", "architecture",
    "transUses", "transHome", "transPath", "site", "campaign", "goal", "nucleus", "requestType", "gshare",
    "resource_type", "container_name", "framework", "ramUnit", "walltimeUnit", "outDiskUnit", "workDiskUnit",
    "cpuTimeUnit", "ioIntensityUnit",
)
# Features that describe the kind of work rather than the fault; they associate with the symptom.
CONTEXT_TASK_KEYS = frozenset({
    "prodSourceLabel", "taskType", "processingType", "vo", "architecture", "transUses", "resource_type",
    "gshare", "requestType", "campaign", "goal", "framework",
})
SENSITIVE_TASK_KEYS = ("userName", "prodUserName", "prodUserID")
PROSE_TASK_KEYS = ("taskName",)

_GB = 1024.0
_HOUR = 3600.0
# ramCount is in MB (per core); 500 MB steps up to 3 GB keep requests that differ by a scout's overshoot
# (1500 against 2000 MB) apart, where one 1-2 GB bucket merged them.
_MEMORY_EDGES_MB = (1000, 1500, 2000, 2500, 3000, 4000, 6000, 8000, 16000)
_DISK_EDGES_GB = (1, 5, 10, 50, 100, 500)
_TIME_EDGES_H = (1, 6, 12, 24, 48)


def _bucket(value: float, edges: tuple[float, ...], unit: str) -> str:
    lower: float = 0
    for edge in edges:
        if value < edge:
            return f"{lower}-{edge}{unit}"
        lower = edge
    return f">{edges[-1]}{unit}"


def _non_negative(raw: Any, kind: type[float] | type[int] = float) -> float | int | None:
    """``raw`` as a number of ``kind`` when it is one and not negative, else None."""
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def bucket_continuous(key: str, raw: Any) -> str | None:
    """Bucket a continuous field; None when the value is absent or not a number (reported, not guessed)."""
    value = _non_negative(raw)
    if value is None:
        return None
    if key in ("ramCount", "baseRamCount"):
        return _bucket(value, _MEMORY_EDGES_MB, "MB")
    if key in ("outDiskCount", "workDiskCount"):
        return _bucket(value / _GB, _DISK_EDGES_GB, "GB")
    if key in ("walltime", "baseWalltime", "cpuTime"):
        return _bucket(value / _HOUR, _TIME_EDGES_H, "h")
    if key in ("diskIO", "ioIntensity"):
        return _bucket(value, (10, 100, 1000, 10000), "")
    return None


# The pilot's memory monitor reports the payload's peak PSS in the error dialog ("pilot:1305 Failed to execute
# payload: maxPSS=5000 MB exceeded", as the PanDA server returns it). It is what the jobs used, where ramCount
# is what the task asked for: two causes of one memory error class that differ in the kind of payload differ
# in it even when the request is missing or was changed since (issue 30, read what the dialog says).
_PEAK_MEMORY = re.compile(r"\bmaxPSS\s*[=:]?\s*(\d{2,7})\s*MB", re.IGNORECASE)
# How much of an errorDialog is read: classified, searched for a peak memory, described and stored. PanDA's
# task table holds 510 characters of it (error_classes notes it), so real dialogs say everything that
# defines them well inside this; the stored raw description was already this head. A task file or incident
# may still carry megabytes there (ingest takes 8 MiB), and the classifier's ~30 regular expressions over
# 8 MB of dialog held the worker's event loop for 2-7 s, on every analysis and every accumulation.
MAX_DIALOG_SCAN = 2000


def dialog_head(dialog: str) -> str:
    """The part of an error dialog (or any error-like task field) that routing reads: its first
    `MAX_DIALOG_SCAN` characters. Every scan of a dialog goes through this, so none grows with the input."""
    return dialog[:MAX_DIALOG_SCAN]


def dialog_peak_memory(dialog: str) -> int | None:
    """The peak PSS in MB an error dialog reports, or None (the first one when it gives several)."""
    found = _PEAK_MEMORY.search(dialog_head(dialog))
    return int(found.group(1)) if found else None


# How many of a splitRule's comma-separated parts become features, read from its first MAX_DIALOG_SCAN
# characters (`split_rule_parts`). PanDA's rules have a few dozen short parts; one malformed file carried
# 200,000, each a Task_Feature node and a contribute_to edge: the loop was held for 1.4 s per routing,
# the graph bloated, and an analysis's clues grew to 16 MiB, far past Temporal's 2 MiB payload limit.
MAX_SPLIT_PARTS = 64


def split_rule_parts(rule: str) -> tuple[list[str], str | None]:
    """The parts of a splitRule routing reads, and what it left unread (None when it read them all): at most
    `MAX_SPLIT_PARTS` parts, all within the rule's `dialog_head`, never one cut short by the head's end."""
    head = dialog_head(rule)
    parts = head.split(",", MAX_SPLIT_PARTS)
    if len(parts) > MAX_SPLIT_PARTS:
        return parts[:MAX_SPLIT_PARTS], f"splitRule: more than {MAX_SPLIT_PARTS} parts; only the first {MAX_SPLIT_PARTS} are read"
    if len(head) < len(rule):
        if rule[len(head)] != ",":
            parts = parts[:-1]  # the head ends inside this part: its value would be read cut short
        return parts, f"splitRule: longer than {MAX_DIALOG_SCAN} characters; only the parts within them are read"
    return parts, None


CONTINUOUS_TASK_KEYS = ("ramCount", "baseRamCount", "outDiskCount", "workDiskCount", "diskIO", "walltime",
                        "baseWalltime", "cpuTime", "ioIntensity")


def pseudonymise(value: str, key: bytes) -> str:
    digest = hmac.new(key, value.strip().lower().encode("utf-8"), hashlib.sha256).hexdigest()
    return f"user-{digest[:10]}"


_TAG = re.compile(r"<[^>]+>")


def strip_html(text: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(_TAG.sub(" ", text))).strip()


class TaskClues(BaseModel):
    symptoms: list[GraphNode] = Field(default_factory=list)
    features: list[GraphNode] = Field(default_factory=list)
    context_features: list[GraphNode] = Field(default_factory=list)
    components: list[GraphNode] = Field(default_factory=list)
    prose: dict[str, str] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list, description="fields ignored, with why")


# Job records the analysis attaches to a task (PanDA's task/get_job_descriptions, failed jobs only):
# the pilot's own error code and the site that ran the job are what tell causes of one symptom apart.
JOB_RECORDS_KEY = "failedJobs"
MAX_JOB_RECORDS = 50
# How many pilot error codes and computing sites one task contributes (each a feature linked to its cause): those
# the most job records carry, ties by first seen, the error dialog's own code always among the codes. Up to 50 made
# one crafted incident link every code and site of the store to a cause of its choosing. The generated corpora
# (bamboo/samples/generator.py, bench/diagnosis/corpus.py) carry at most 3 of each per task, dialog code included.
MAX_JOB_CODES = 3
MAX_JOB_SITES = 3


def retry_bucket(raw: Any) -> str | None:
    """retryID as "0", "1" or "2+" (how often an operator already retried), None when not a number."""
    value = _non_negative(raw, int)
    if value is None:
        return None
    return "2+" if value >= 2 else str(value)


def failed_share_bucket(jobs: Any, failed: Any) -> str | None:
    """nJobsFailed / nJobs as none, few (< 10%), some (< 50%), most or all; None without jobs."""
    total, bad = _non_negative(jobs, int), _non_negative(failed, int)
    if not total or bad is None:
        return None
    share = min(bad, total) / total
    if share == 0:
        return "none"
    if share >= 1:
        return "all"
    return "few" if share < 0.1 else "some" if share < 0.5 else "most"


# What a clue keeps of a task's raw value (props, skipped-field notes): a field may hold megabytes, and
# every clue travels in prompts, workflow histories and the store.
MAX_RAW_CHARS = 300


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_RAW_CHARS else text[: MAX_RAW_CHARS - 1] + "…"


def _feature(attribute: str, value: Any, **props: Any) -> GraphNode:
    text = _short(str(value).strip())
    return GraphNode(kind="Task_Feature", name=f"{attribute}={text}"[:MAX_NAME],
                     props={"attribute": attribute, "value": text, **props})


def most_carried(values: list[str], limit: int, first: str | None = None) -> list[str]:
    """At most ``limit`` distinct values: ``first`` (when given), then those ``values`` holds most often, ties by
    first seen; in the order first seen (``first`` ahead), so a task with no more than ``limit`` keeps its
    features as they were."""
    ranked = [v for v, _ in Counter(v for v in values if v != first).most_common()]  # stable: ties by first seen
    chosen = set(([first] if first is not None else []) + ranked[: limit - (first is not None)])
    return [v for v in dict.fromkeys(([first] if first is not None else []) + values) if v in chosen]


def route_task_data(task: dict[str, Any], pseudonym_key: bytes) -> TaskClues:
    clues = TaskClues()
    raw_dialog = task.get("errorDialog")
    dialog = dialog_head(raw_dialog) if isinstance(raw_dialog, str) else None  # read no further (MAX_DIALOG_SCAN)
    if isinstance(dialog, str) and dialog.strip():
        klass = classify_error_dialog(dialog)
        clues.symptoms.append(GraphNode(
            kind="Symptom", name=klass.category, description=strip_html(dialog)[:500],
            props={"raw_description": dialog, "matched_rule": klass.matched_rule,
                   "pilot_error_code": klass.pilot_error_code, "classifier_confidence": klass.confidence},
        ))
    dialog_code: str | None = None
    if isinstance(dialog, str) and dialog.strip() and klass.pilot_error_code is not None:
        dialog_code = str(klass.pilot_error_code)
    peak = dialog_peak_memory(dialog) if isinstance(dialog, str) else None
    if peak is not None:
        clues.features.append(_feature("maxPSS", _bucket(peak, _MEMORY_EDGES_MB, "MB"), concept="continuous",
                                       raw=peak, source="errorDialog"))
    status = task.get("status")
    # Incidents and tasks are checked where they enter (`task_problem`); a status that was not is
    # reported, never built into a node the graph model refuses.
    status_refused = status_problem(status)
    if status_refused:
        clues.skipped.append(f"status: {_short(status_refused)}")
    elif isinstance(status, str) and status.strip():
        # The graph id and the analysis workflow id are named from the same canonical form.
        canonical = canonical_status(status)
        clues.symptoms.append(GraphNode(kind="Symptom", name=f"TaskStatus{canonical.capitalize()}",
                                        description=f"task status {canonical}"))

    for key in DISCRETE_TASK_KEYS:
        value = task.get(key)
        if value is None or value == "" or isinstance(value, (dict, list)):
            continue
        node = _feature(key, value, concept="discrete")
        (clues.context_features if key in CONTEXT_TASK_KEYS else clues.features).append(node)
    for key in CONTINUOUS_TASK_KEYS:
        if key not in task or task[key] in (None, ""):
            continue
        bucket = bucket_continuous(key, task[key])
        if bucket is None:
            clues.skipped.append(f"{key}: not a non-negative number ({_short(task[key])})")
            continue
        raw = task[key] if isinstance(task[key], (int, float)) else _short(task[key])
        clues.features.append(_feature(key, bucket, concept="continuous", raw=raw))
    retry = retry_bucket(task["retryID"]) if task.get("retryID") not in (None, "") else None
    if retry is not None:
        raw = task["retryID"] if isinstance(task["retryID"], int) else _short(task["retryID"])
        clues.features.append(_feature("retryID", retry, concept="count", raw=raw))
    share = failed_share_bucket(task.get("nJobs"), task.get("nJobsFailed"))
    if share is not None:
        clues.features.append(_feature("failedJobs", share, concept="count"))
    jobs = task.get(JOB_RECORDS_KEY)
    codes: list[str] = []
    sites: list[str] = []
    if isinstance(jobs, list):
        for job in jobs[:MAX_JOB_RECORDS]:
            if not isinstance(job, dict):
                continue
            code, site = job.get("pilotErrorCode"), job.get("computingSite")
            if isinstance(code, int) and code > 0:
                codes.append(str(code))
            if isinstance(site, str) and site.strip():
                sites.append(site.strip())
    for code in most_carried(codes, MAX_JOB_CODES, first=dialog_code):
        clues.features.append(_feature("pilotErrorCode", code, concept="discrete"))
    for site in most_carried(sites, MAX_JOB_SITES):
        clues.features.append(_feature("computingSite", site, concept="discrete"))
    if (left := len(set(codes) | ({dialog_code} if dialog_code else set())) - MAX_JOB_CODES) > 0:
        clues.skipped.append(f"{JOB_RECORDS_KEY}: {left} more pilot error code(s) not linked: only the {MAX_JOB_CODES} "
                             "the most job records carry are")
    if (left := len(set(sites)) - MAX_JOB_SITES) > 0:
        clues.skipped.append(f"{JOB_RECORDS_KEY}: {left} more computing site(s) not linked: only the {MAX_JOB_SITES} "
                             "the most job records carry are")
    split_rule = task.get("splitRule")
    if isinstance(split_rule, str):
        parts, unread = split_rule_parts(split_rule)
        for part in parts:
            k, sep, v = part.partition("=")
            if sep and k.strip():
                clues.features.append(_feature(f"splitRule:{k.strip()}", v.strip(), concept="split"))
        if unread:
            clues.skipped.append(unread)
    for key in SENSITIVE_TASK_KEYS:
        value = task.get(key)
        if value not in (None, ""):
            clues.features.append(_feature("user", pseudonymise(str(value), pseudonym_key), concept="identity"))
            break
    for key in PROSE_TASK_KEYS:
        value = task.get(key)
        if isinstance(value, str) and value.strip():
            clues.prose[key] = value.strip()[:1000]
    args = task.get("task_creation_arguments")
    if isinstance(args, str):
        # Only the command names the component: its first word, looked for in a bounded head (the arguments
        # after it may run to megabytes, and splitting them all was work sized by the input, on the loop).
        words = dialog_head(args).split(maxsplit=1)
        if words:
            clues.components.append(GraphNode(kind="Component", name=words[0][:MAX_NAME],
                                              props={"system": "submission_tool"}))
        elif len(args) > MAX_DIALOG_SCAN:
            clues.skipped.append(f"task_creation_arguments: no command in its first {MAX_DIALOG_SCAN} characters")
    return clues
