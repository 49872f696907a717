"""The contract tier's world: the same three tasks, datasets, files and jobs as the real server's seed data.

The contract tests run one set of assertions against the simulator and against the real PanDA server; for
their answers to be comparable the simulator must hold what the server's database holds: task 1001 failed
and owned by the test identity (two failed jobs, one finished, three input files), 1002 running and owned by
someone else, 1003 running and owned by the test identity, no jobs. Times are relative to when the world
is built, as the seed's ``now() - interval`` makes them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bamboo.panda.simulator.records import job_row, task_row
from bamboo.panda.simulator.world import Dataset, World

TEST_DN = "/DC=ch/DC=cern/OU=Users/CN=bamboo tester"
TEST_USER = "bamboo tester"
OTHER_USER = "someone else"
FAILED_TASK, OTHERS_TASK, RUNNING_TASK = 1001, 1002, 1003
PAYLOAD_DIAG = "Failed to execute payload: maxPSS=5000 MB exceeded"


def _task(now: datetime, tid: int, name: str, status: str, user: str, created_ago: timedelta, modified_ago: timedelta,
          **extra) -> dict:
    return task_row({
        "jediTaskID": tid, "taskName": name, "status": status, "userName": user, "creationDate": now - created_ago,
        "modificationTime": now - modified_ago, "prodSourceLabel": "user", "vo": "atlas", "taskType": "anal",
        "processingType": "panda-client-1.5", "site": "ANALY_TEST", "cloud": "WORLD", "reqID": tid,
        "gshare": "User Analysis", "ramCount": 2000, "ramUnit": "MBPerCore", "coreCount": 1, "attemptNr": 0, **extra,
    })


def _job(now: datetime, panda_id: int, status: str, name: str, **extra) -> dict:
    return job_row({
        "PandaID": panda_id, "jediTaskID": FAILED_TASK, "jobStatus": status, "jobName": name, "attemptNr": 1,
        "prodSourceLabel": "user", "prodUserName": TEST_USER, "computingSite": "ANALY_TEST",
        "creationTime": now - timedelta(hours=3), "modificationTime": now - timedelta(hours=2),
        "startTime": now - timedelta(minutes=170), "endTime": now - timedelta(hours=2), **extra,
    })


def contract_world(now: datetime | None = None) -> World:
    now = now or datetime.now()
    world = World()
    world.tasks[FAILED_TASK] = _task(
        now, FAILED_TASK, "user.bamboo.test.failing/", "failed", TEST_USER, timedelta(days=2), timedelta(hours=1),
        errorDialog=f"pilot:1305 {PAYLOAD_DIAG}", splitRule="RO=1,NG=1", attemptNr=1)
    world.tasks[OTHERS_TASK] = _task(
        now, OTHERS_TASK, "user.other.running/", "running", OTHER_USER, timedelta(days=1), timedelta(minutes=10))
    world.tasks[RUNNING_TASK] = _task(
        now, RUNNING_TASK, "user.bamboo.test.running/", "running", TEST_USER, timedelta(days=1), timedelta(minutes=5))
    world.task_params[FAILED_TASK] = {
        "taskName": "user.bamboo.test.failing/", "userName": TEST_USER,
        "cliParams": "prun --exec run.sh --outDS user.bamboo.test.failing/", "vo": "atlas"}
    world.job_templates[FAILED_TASK] = '-j "" -p "run.sh"'
    world.datasets[FAILED_TASK] = [
        Dataset(5001, "data23:data23.test.input", "input", "ready", [
            {"lfn": "input.1.root", "scope": "data23", "id": 7001, "status": "finished"},
            {"lfn": "input.2.root", "scope": "data23", "id": 7002, "status": "failed"},
            {"lfn": "input.3.root", "scope": "data23", "id": 7003, "status": "failed"},
        ]),
        Dataset(5002, "user.bamboo.test.failing_out/", "output", "defined"),
    ]
    failed = {"pilotErrorCode": 1305, "pilotErrorDiag": PAYLOAD_DIAG, "transExitCode": "137"}
    world.jobs[FAILED_TASK] = [
        _job(now, 9000001, "finished", "job1", transExitCode="0"),
        _job(now, 9000002, "failed", "job2", jobParameters="-p run.sh", Files=[{
            "row_ID": 1, "PandaID": 9000002, "lfn": "input.2.root", "type": "input",
            "dataset": "data23:data23.test.input", "status": "ready", "scope": "data23", "jediTaskID": FAILED_TASK,
            "datasetID": 5001, "fileID": 7002}], **failed),
        _job(now, 9000003, "failed", "job3", **failed),
    ]
    world.jobs[OTHERS_TASK] = []
    world.jobs[RUNNING_TASK] = []
    return world
