"""A task id Temporal's Int search attribute and Postgres' bigint cannot hold hung `bamboo analyze`
(the workflow task retried forever) and stalled batches: it is refused where it enters."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bamboo.analysis.contract import AnalyzeInput, Feedback, TaskSource
from bamboo.analysis.task_files import TaskFileError, read_task_file

TOO_BIG = [2**63, 2**70]
MAX_TASK_ID = 2**63 - 1


@pytest.mark.parametrize("tid", [*TOO_BIG, 0, -5, True, "12", 1.5])
def test_unusable_task_ids_are_named(tid):
    from bamboo.models.incident import task_id_problem

    assert task_id_problem(tid)


@pytest.mark.parametrize("tid", [None, 1, 40512347, MAX_TASK_ID])
def test_usable_task_ids_pass(tid):
    from bamboo.models.incident import task_id_problem

    assert task_id_problem(tid) is None


@pytest.mark.parametrize("tid", [*TOO_BIG, True])
def test_task_file_with_an_unusable_id_is_a_clear_error(tmp_path, tid):
    f = tmp_path / "task.json"
    f.write_text(json.dumps({"jediTaskID": tid, "status": "broken"}))
    with pytest.raises(TaskFileError) as caught:
        read_task_file(f)
    assert str(f) in str(caught.value) and "jediTaskID" in str(caught.value)


@pytest.mark.parametrize("tid", [*TOO_BIG, True])
def test_analysis_inputs_refuse_unusable_ids(tid):
    with pytest.raises(ValidationError, match="jediTaskID"):
        AnalyzeInput(task_data={"jediTaskID": tid, "status": "broken"})
    with pytest.raises(ValidationError):
        Feedback(task_id=tid, verdict="correct", cause="Insufficient memory")
    with pytest.raises(ValidationError):
        TaskSource(path="t.json", task_id=tid, status="broken")
    assert AnalyzeInput(task_data={"jediTaskID": MAX_TASK_ID}).task_data["jediTaskID"] == MAX_TASK_ID


# Issue 28, finding 10: one check of a task wherever it enters, each a one-line reason.
@pytest.mark.parametrize("status,reason", [
    ("broken" * 1000, "task_data.status is 6000 characters long"),
    ("broken\u0000", "is not a task status"),
    ("running|failed", "is not a task status"),
])
def test_analysis_inputs_refuse_a_status_no_workflow_id_can_hold(status, reason):
    with pytest.raises(ValidationError, match=reason.replace("|", r"\|")):
        AnalyzeInput(task_data={"jediTaskID": 5, "status": status})


def test_a_task_file_is_read_like_an_incident_file(tmp_path):
    import os

    from bamboo.analysis.task_files import check_task_id, list_task_files

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.json").write_text(json.dumps({"jediTaskID": 5, "status": "broken"}))
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "link.json").symlink_to(outside / "t.json")
    os.mkfifo(batch / "fifo.json")
    (batch / "deep.json").write_text('{"jediTaskID": 5, "x": ' + "[" * 10_000 + "]" * 10_000 + "}")
    (batch / "twice.json").write_text('{"jediTaskID": 5, "status": "broken", "status": "done"}')
    reasons = {"link.json": "symbolic link to a file outside", "fifo.json": "is a FIFO", "deep.json": "nested",
               "twice.json": "appears twice"}
    for name, reason in reasons.items():
        with pytest.raises(TaskFileError, match=reason):
            read_task_file(batch / name)
    listed = list_task_files(batch)
    assert sorted(s.path.rsplit("/", 1)[-1] for s in listed) == sorted(reasons)
    assert all(s.task_id is None for s in listed), "nothing was read through the link"
    with pytest.raises(TaskFileError, match="--task-id: jediTaskID 1180591620717411303424 is out of range"):
        check_task_id(2**70)
    assert check_task_id(40512347) == 40512347
