"""One incident is one graph whatever the case or punctuation of its status: "finished", "Finished",
"FINISHED", "finished_" and "fin-ished" were five graphs (`panda:<id>:<status>`), the cause counted five times,
and two status clues (TaskStatusFinished, TaskStatusFinIshed). The graph id, the analysis workflow id and the
TaskStatus clue are built from one canonical form (lower case, letters only)."""

from __future__ import annotations

import json

import pytest

from bamboo.analysis.client import analysis_id
from bamboo.analysis.task_files import TaskFileError, list_task_files, read_task_file, task_fields
from bamboo.extraction.panda.routing import route_task_data
from bamboo.ingest import IncidentRejected, parse_incident
from bamboo.models.incident import Incident

SPELLINGS = ["finished", "Finished", "FINISHED", "finished_", "fin-ished"]
TASK = {"jediTaskID": 48981982, "errorDialog": "pilot:1204 walltime exceeded"}


def _incident(status: str) -> Incident:
    return Incident.model_validate({"incident_id": "i", "task_data": {**TASK, "status": status},
                                    "resolution_record": {"cause": "Walltime request too short",
                                                          "resolution": "Increase the walltime"}})


def _status_clue(task: dict) -> list[tuple[str, str]]:
    return [(s.name, s.description) for s in route_task_data(task, b"k").symptoms if s.name.startswith("TaskStatus")]


@pytest.mark.parametrize("status", SPELLINGS)
def test_every_spelling_of_a_status_names_one_graph_one_clue_and_one_analysis(status, tmp_path):
    incident = _incident(status)
    assert incident.graph_id() == "panda:48981982:finished"
    assert incident.task_data["status"] == "finished", "canonicalised where the incident enters"
    assert _status_clue({**TASK, "status": status}) == [("TaskStatusFinished", "task status finished")]
    assert _status_clue(incident.task_data) == [("TaskStatusFinished", "task status finished")]

    # The analysis of the same task: `bamboo analyze --task-data`, analyze-batch, the bot and the console read a
    # task through task_fields; the workflow id and the result file are named from what it returns.
    task = task_fields({**TASK, "status": status}, "t")
    assert task["status"] == "finished" and analysis_id(task) == "analyze:48981982:finished"
    (tmp_path / "t.json").write_text(json.dumps({"task_data": {**TASK, "status": status}}))
    assert read_task_file(tmp_path / "t.json")["status"] == "finished"
    [source] = list_task_files(tmp_path)
    assert source.workflow_id() == "analyze:48981982:finished"


def test_the_same_incident_file_in_five_spellings_is_one_graph():
    """The reviewer's reproducer (/tmp/s46/review-ingest/repro_dupstatus.sh), short of the store: five files that
    differ only in the status's spelling."""
    ids = {parse_incident(json.dumps({"task_data": {**TASK, "status": s}}).encode(), f"same{i}").graph_id()
           for i, s in enumerate(SPELLINGS)}
    assert ids == {"panda:48981982:finished"}


@pytest.mark.parametrize("status", ["fin ished", "5finished", "finished!", "x" * 65])
def test_what_is_no_status_at_all_is_still_refused_in_one_line(status):
    with pytest.raises(IncidentRejected) as refused:
        parse_incident(json.dumps({"task_data": {**TASK, "status": status}}).encode(), "x")
    assert "task_data.status" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(TaskFileError):
        task_fields({**TASK, "status": status}, "t")


def test_a_canonical_status_and_no_status_are_unchanged():
    assert _incident("exhausted").graph_id() == "panda:48981982:exhausted"
    assert _status_clue({"status": "tobroken"}) == [("TaskStatusTobroken", "task status tobroken")]
    no_status = Incident.model_validate({"incident_id": "i", "task_data": dict(TASK), "email_text": "x"})
    assert no_status.graph_id() == "panda:48981982:unknown" and "status" not in no_status.task_data
