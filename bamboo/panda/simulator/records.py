"""The shapes of the records the real PanDA server (1.0.4) returns, so the simulator answers with the same keys.

Attribute names and their order are the server's: a task's detailed info is every ``JediTaskSpec`` attribute
plus a few computed keys, a job is every ``JobSpec`` attribute plus its ``Files`` (and, from the task's job
list, ``jobDuration`` and ``extendedProdSourceLabel``). A record the simulator builds from an incident keeps
only these keys: anything else in an incident (``nJobs``, ``retryID``...) is not something PanDA would say.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

TASK_ATTRIBUTES = (
    "jediTaskID", "taskName", "status", "userName", "creationDate", "modificationTime", "startTime", "endTime",
    "frozenTime", "prodSourceLabel", "workingGroup", "vo", "coreCount", "taskType", "processingType",
    "taskPriority", "currentPriority", "architecture", "transUses", "transHome", "transPath", "lockedBy",
    "lockedTime", "termCondition", "splitRule", "walltime", "walltimeUnit", "outDiskCount", "outDiskUnit",
    "workDiskCount", "workDiskUnit", "ramCount", "ramUnit", "ioIntensity", "ioIntensityUnit", "workQueue_ID",
    "progress", "failureRate", "errorDialog", "reqID", "oldStatus", "cloud", "site", "countryGroup", "parent_tid",
    "eventService", "ticketID", "ticketSystemType", "stateChangeTime", "superStatus", "campaign", "mergeRamCount",
    "mergeRamUnit", "mergeWalltime", "mergeWalltimeUnit", "throttledTime", "numThrottled", "mergeCoreCount", "goal",
    "assessmentTime", "cpuTime", "cpuTimeUnit", "cpuEfficiency", "baseWalltime", "nucleus", "baseRamCount",
    "ttcRequested", "ttcPredicted", "ttcPredictionDate", "rescueTime", "requestType", "gshare", "resource_type",
    "useJumbo", "diskIO", "diskIOUnit", "memory_leak_core", "memory_leak_x2", "attemptNr", "container_name",
    "framework", "activatedTime", "queuedTime", "actionTime",
)

JOB_ATTRIBUTES = (
    "PandaID", "jobDefinitionID", "schedulerID", "pilotID", "creationTime", "creationHost", "modificationTime",
    "modificationHost", "AtlasRelease", "transformation", "homepackage", "prodSeriesLabel", "prodSourceLabel",
    "prodUserID", "assignedPriority", "currentPriority", "attemptNr", "maxAttempt", "jobStatus", "jobName",
    "maxCpuCount", "maxCpuUnit", "maxDiskCount", "maxDiskUnit", "ipConnectivity", "minRamCount", "minRamUnit",
    "startTime", "endTime", "cpuConsumptionTime", "cpuConsumptionUnit", "commandToPilot", "transExitCode",
    "pilotErrorCode", "pilotErrorDiag", "exeErrorCode", "exeErrorDiag", "supErrorCode", "supErrorDiag",
    "ddmErrorCode", "ddmErrorDiag", "brokerageErrorCode", "brokerageErrorDiag", "jobDispatcherErrorCode",
    "jobDispatcherErrorDiag", "taskBufferErrorCode", "taskBufferErrorDiag", "computingSite", "computingElement",
    "jobParameters", "metadata", "prodDBlock", "dispatchDBlock", "destinationDBlock", "destinationSE", "nEvents",
    "grid", "cloud", "cpuConversion", "sourceSite", "destinationSite", "transferType", "taskID", "cmtConfig",
    "stateChangeTime", "prodDBUpdateTime", "lockedby", "relocationFlag", "jobExecutionID", "VO", "pilotTiming",
    "workingGroup", "processingType", "prodUserName", "nInputFiles", "countryGroup", "batchID", "parentID",
    "specialHandling", "jobsetID", "coreCount", "nInputDataFiles", "inputFileType", "inputFileProject",
    "inputFileBytes", "nOutputDataFiles", "outputFileBytes", "jobMetrics", "workQueue_ID", "jediTaskID",
    "jobSubStatus", "actualCoreCount", "reqID", "maxRSS", "maxVMEM", "maxSWAP", "maxPSS", "avgRSS", "avgVMEM",
    "avgSWAP", "avgPSS", "maxWalltime", "nucleus", "eventService", "failedAttempt", "hs06sec", "gshare", "hs06",
    "totRCHAR", "totWCHAR", "totRBYTES", "totWBYTES", "rateRCHAR", "rateWCHAR", "rateRBYTES", "rateWBYTES",
    "resource_type", "diskIO", "memory_leak", "memory_leak_x2", "container_name", "job_label", "gco2_regional",
    "gco2_global", "cpu_architecture_level", "outputFileType",
)

FILE_ATTRIBUTES = (
    "row_ID", "PandaID", "GUID", "lfn", "type", "dataset", "status", "prodDBlock", "prodDBlockToken",
    "dispatchDBlock", "dispatchDBlockToken", "destinationDBlock", "destinationDBlockToken", "destinationSE", "fsize",
    "md5sum", "checksum", "scope", "jediTaskID", "datasetID", "fileID", "attemptNr",
)

EPOCH = datetime(1970, 1, 1)
# What a job row holds when nobody set the column (the table defaults the server reads back).
JOB_DEFAULTS: dict[str, Any] = {
    "jobDefinitionID": 0, "prodSeriesLabel": "Rome", "assignedPriority": 0, "currentPriority": 0, "attemptNr": 0,
    "maxAttempt": 0, "maxCpuCount": 0, "maxDiskCount": 0, "minRamCount": 0, "cpuConsumptionTime": 0,
    "pilotErrorCode": 0, "exeErrorCode": 0, "supErrorCode": 0, "ddmErrorCode": 0, "brokerageErrorCode": 0,
    "jobDispatcherErrorCode": 0, "taskBufferErrorCode": 0, "nEvents": 0, "stateChangeTime": EPOCH,
    "prodDBUpdateTime": EPOCH, "relocationFlag": 0, "jobExecutionID": 0,
}
FILE_DEFAULTS: dict[str, Any] = {"fsize": 0}

# The short split-rule codes the simulator's tasks use, with the names the server decodes them to.
SPLIT_RULE_NAMES = {
    "RO": "reuseSecOnDemand", "NG": "nGBPerJob", "NF": "nFilesPerJob", "NE": "nEventsPerJob",
    "MF": "nMaxFilesPerJob", "SC": "useScout", "ES": "nEventsPerWorker", "UZ": "usePrefetcher",
}

# JEDI's job states that count as "unsuccessful" for task/get_job_descriptions?unsuccessful_only.
UNSUCCESSFUL_JOB_STATES = frozenset({"failed", "cancelled", "closed"})
FINAL_JOB_STATES = frozenset({"finished", "failed", "cancelled", "closed"})


def decode_split_rule(rule: str | None) -> str | None:
    """``RO=1,NG=1`` -> ``reuseSecOnDemand=1,nGBPerJob=1``, as get_detailed_info answers."""
    if not rule:
        return rule
    parts = []
    for item in str(rule).split(","):
        code, sep, value = item.partition("=")
        parts.append(f"{SPLIT_RULE_NAMES.get(code, code)}{sep}{value}")
    return ",".join(parts)


def task_row(values: dict[str, Any]) -> dict[str, Any]:
    """A JEDI task row: every attribute, None where the values do not say."""
    return {name: values.get(name) for name in TASK_ATTRIBUTES}


def job_row(values: dict[str, Any]) -> dict[str, Any]:
    """A job row: every JobSpec attribute with the table defaults, plus its file rows."""
    row = {name: values.get(name, JOB_DEFAULTS.get(name)) for name in JOB_ATTRIBUTES}
    row["Files"] = [file_row(f) for f in values.get("Files", [])]
    return row


def file_row(values: dict[str, Any]) -> dict[str, Any]:
    return {name: values.get(name, FILE_DEFAULTS.get(name)) for name in FILE_ATTRIBUTES}


def job_description(row: dict[str, Any], *, extra_info: bool) -> dict[str, Any]:
    """What job/get_description* answer (``extra_info=False``) or task/get_job_descriptions (``True``)."""
    out = {name: row.get(name) for name in JOB_ATTRIBUTES}
    out["Files"] = [dict(f) for f in row.get("Files", [])]
    if extra_info:
        start, end = row.get("startTime"), row.get("endTime")
        out["jobDuration"] = (end - start).total_seconds() if isinstance(start, datetime) and isinstance(end, datetime) else None
        scout = "sj" in str(row.get("specialHandling") or "").split(",")
        out["extendedProdSourceLabel"] = f"{row.get('prodSourceLabel')}_{'scout' if scout else 'normal'}"
    return out
