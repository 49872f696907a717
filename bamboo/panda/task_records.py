"""A task as analysis reads it from PanDA: the task's fields plus its failed jobs' records.

The task record says what failed (``errorDialog``, status, parameters); the job records say how: the
pilot's error code and the site of each failed job tell apart causes that share one symptom class
(a queue that is offline against one in downtime, a job that hit the walltime against one with too many
events). Routing reads them from ``failedJobs`` (bamboo.extraction.panda.routing.JOB_RECORDS_KEY), both
when a resolved incident is learned and when a new task is analysed, so the two name the same clues.
"""

from __future__ import annotations

from typing import Any

from bamboo.extraction.panda.routing import JOB_RECORDS_KEY, MAX_JOB_RECORDS
from bamboo.panda.client import PandaClient
from bamboo.panda.errors import PandaError

# What a failed job contributes to analysis; the rest of a job record (about 150 fields) stays in PanDA.
JOB_FIELDS = ("PandaID", "jobStatus", "computingSite", "pilotErrorCode", "pilotErrorDiag", "exeErrorCode",
              "exeErrorDiag", "maxPSS", "minRamCount", "attemptNr")


def compact_job(job: dict[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in JOB_FIELDS if job.get(k) not in (None, "")}


async def task_for_analysis(panda: PandaClient, task_id: int) -> tuple[dict[str, Any], str]:
    """(the task with up to MAX_JOB_RECORDS failed jobs under ``failedJobs``, a note: "" or why jobs are absent).

    A task PanDA cannot return raises as ``get_task`` does; jobs PanDA cannot return leave the task
    analysable on its own fields, and the note says so."""
    task = dict(await panda.get_task(task_id))
    try:
        jobs = await panda.get_job_descriptions(task_id, unsuccessful_only=True)
    except PandaError as exc:
        return task, f"the task's failed jobs could not be read ({exc}); analysed on the task's fields alone"
    task[JOB_RECORDS_KEY] = [compact_job(j) for j in jobs[:MAX_JOB_RECORDS] if isinstance(j, dict)]
    return task, ""
