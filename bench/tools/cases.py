"""Labelled symptom -> tools cases for measuring tool selection, and the catalogue they run against.

Each case is a symptom as an operator or an errorDialog would phrase it, the tools a shifter would
reach for first, and a category (cases of one category are "similar past runs" for each other).
The catalogue is the built-in PanDA tools plus plausible operations tools from external servers,
padded with distractors to the size under test.
"""

from __future__ import annotations

from bamboo.panda.tools import builtin_tools
from bamboo.tools.model import ToolOrigin, ToolSpec

OPS_TOOLS: list[tuple[str, str]] = [
    ("site_downtime_calendar", "Scheduled and unscheduled downtimes of a grid site or storage endpoint. Use when jobs are stuck or fail at one site."),
    ("rucio_list_replicas", "Replica locations and availability of a dataset or file in Rucio. Use for lost, missing or unavailable input."),
    ("rucio_file_checksum", "Checksum (adler32) and size of a file as recorded in Rucio. Use for corrupted input or checksum mismatch."),
    ("cvmfs_repository_status", "Health and revision of the CVMFS software repositories at a site. Use when a release or setup script is missing."),
    ("container_registry_lookup", "Whether a container image exists in the registry and for which platforms. Use for image not found errors."),
    ("storage_quota_usage", "Used and free space and quota of a storage endpoint (RSE) or scratch disk. Use for stage-out quota or disk full errors."),
    ("voms_proxy_info", "Validity, VO attributes and expiry time of the proxy a task was submitted with. Use for authentication and expired proxy failures."),
    ("queue_memory_limits", "Memory, core count and walltime limits of the batch queues at a site. Use for brokerage exclusions and memory or walltime kills."),
    ("network_transfer_status", "Recent transfer throughput and failures between two sites. Use for slow or timing out stage-in and stage-out."),
    ("pilot_error_reference", "Meaning of a pilot error code and its usual causes. Use to interpret pilot:NNNN codes."),
]

DISTRACTOR_TOPICS = [
    "monitoring dashboard panel", "accounting report", "user mailing list", "calendar of meetings", "conference room booking",
    "documentation page index", "git merge request status", "continuous integration pipeline", "software license inventory",
    "printer queue", "office inventory", "travel request", "shift schedule roster", "vacation planner", "wiki page history",
    "chat channel archive", "code review statistics", "budget spreadsheet", "hardware procurement order", "training course catalogue",
]

# (symptom, expected tools, category)
CASES: list[tuple[str, list[str], str]] = [
    ("Payload ran out of memory: maxPSS=2710 MB exceeds ramCount=2000 MB", ["get_scout_job_details"], "memory"),
    ("scouts failed reason=OutOfMemory, maxPSS above the requested memory", ["get_scout_job_details"], "memory"),
    ("jobs killed by the OOM killer, memory usage keeps growing during reconstruction", ["get_scout_job_details"], "memory"),
    ("pilot:1212 memory exceeded on many jobs of the task", ["get_scout_job_details", "pilot_error_reference"], "memory"),
    ("memory leak suspected: PSS grows with every event", ["get_scout_job_details"], "memory"),
    ("Reached walltime limit, jobs killed by the batch system", ["get_scout_job_details", "queue_memory_limits"], "walltime"),
    ("all jobs killed: exceeded the maximum run time of the queue", ["get_scout_job_details", "queue_memory_limits"], "walltime"),
    ("jobs at one site run three times slower than elsewhere and hit the time limit", ["get_task_jobs_summary", "queue_memory_limits"], "walltime"),
    ("jobs stuck: site in scheduled downtime", ["site_downtime_calendar"], "site"),
    ("task exhausted after many attempts, all failures at the same site", ["get_task_jobs_summary", "site_downtime_calendar"], "site"),
    ("Bad queue configuration reported by the pilot", ["queue_memory_limits", "pilot_error_reference"], "site"),
    ("Input file lost: no replica available for the input dataset", ["rucio_list_replicas", "get_task_input_datasets"], "input"),
    ("merge jobs fail: some input files are missing", ["rucio_list_replicas", "get_task_input_datasets"], "input"),
    ("adler32 checksum mismatch on input file", ["rucio_file_checksum"], "input"),
    ("No matching replicas: input dataset was deleted", ["get_task_input_datasets", "rucio_list_replicas"], "input"),
    ("No release found: setup failed, release not available on CVMFS", ["cvmfs_repository_status"], "software"),
    ("Image not found: the container image could not be pulled", ["container_registry_lookup"], "software"),
    ("Missing platform: architecture not supported by the release", ["get_task_details", "container_registry_lookup"], "software"),
    ("No candidate sites: 0 candidates remained after core count check", ["fetch_linked_log_files", "queue_memory_limits"], "brokerage"),
    ("No candidate sites: all sites excluded by memory requirement", ["fetch_linked_log_files", "queue_memory_limits"], "brokerage"),
    ("no candidate sites remained: all sites excluded by includedSite", ["fetch_linked_log_files", "get_task_details"], "brokerage"),
    ("brokerage log says the task could not be assigned to any site", ["fetch_linked_log_files"], "brokerage"),
    ("Failed to stage-out output file: storage endpoint down", ["storage_quota_usage", "site_downtime_calendar"], "stageout"),
    ("stage-out failed: quota exceeded on SCRATCHDISK", ["storage_quota_usage"], "stageout"),
    ("stage-out timed out, transfers between sites are very slow", ["network_transfer_status"], "stageout"),
    ("too many input files per job: nFilesPerJob exceeds the limit", ["get_task_details", "get_task_input_datasets"], "split"),
    ("job would read thousands of small input files, exceeds the file limit", ["get_task_input_datasets"], "split"),
    ("SIGSEGV: segmentation violation in user code", ["get_failed_job_log_summary"], "usercode"),
    ("python exception in the payload, traceback in payload.stdout", ["get_failed_job_log_summary"], "usercode"),
    ("user job crashes with index out of range after a code change; a previous version worked", ["compare_failed_vs_successful_job_logs", "find_similar_successful_tasks"], "usercode"),
    ("the same analysis ran fine last week, what changed in the log?", ["find_similar_successful_tasks", "compare_failed_vs_successful_job_logs"], "usercode"),
    ("Voms proxy expired: authentication failure", ["voms_proxy_info"], "auth"),
    ("authentication failure: user proxy has expired for group production", ["voms_proxy_info"], "auth"),
    ("No space left on device on the worker node scratch", ["get_failed_job_log_summary", "storage_quota_usage"], "disk"),
    ("payload log file too large, verbose logging filled the disk", ["get_failed_job_log_summary"], "disk"),
    ("pilot:1324 service unavailable", ["pilot_error_reference"], "pilot"),
    ("pilot:1099 failed to stage-in file from the endpoint", ["pilot_error_reference", "rucio_list_replicas"], "pilot"),
    ("Looping job killed by the pilot: no output for hours, remote I/O stalled", ["pilot_error_reference", "get_failed_job_log_summary"], "pilot"),
    ("the task was retried and fails again the same way", ["get_retry_chain"], "retry"),
    ("how many earlier attempts of this task failed and why", ["get_retry_chain"], "retry"),
    ("what fraction of jobs failed and what are the most common errors", ["get_task_jobs_summary"], "overview"),
    ("show me the task parameters and its current status", ["get_task_details"], "overview"),
    ("summarise the log of job 6512408811", ["summarize_job_log"], "overview"),
    ("which input datasets does this task read", ["get_task_input_datasets"], "overview"),
]


def catalogue(size: int) -> list[ToolSpec]:
    """Built-ins, the operations tools, and numbered distractors up to ``size`` tools."""
    specs = [t.spec for t in builtin_tools()]
    specs += [
        ToolSpec(name=name, description=desc, input_schema={"type": "object", "properties": {"site": {"type": "string"}}},
                 read_only=True, external_access=True, origin=ToolOrigin.EXTERNAL, server="ops")
        for name, desc in OPS_TOOLS
    ]
    i = 0
    while len(specs) < size:
        topic = DISTRACTOR_TOPICS[i % len(DISTRACTOR_TOPICS)]
        specs.append(ToolSpec(
            name=f"{topic.replace(' ', '_')}_{i}",
            description=f"Look up the {topic} (instance {i}) and return its entries with owner and date.",
            input_schema={"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}},
            read_only=True, external_access=True, origin=ToolOrigin.EXTERNAL, server=f"misc{i % 7}",
        ))
        i += 1
    return specs[:size]
