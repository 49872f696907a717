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
