"""Clue extraction, the diagnosis schema, the procedure plan and task-file reading, without services."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from bamboo.analysis.clues import extract_clues
from bamboo.analysis.diagnosis import answer_model
from bamboo.analysis.contract import NOVEL, Evidence, TaskClues, analyze_workflow_id
from bamboo.analysis.procedures import builtin_catalog, plan_procedures
from bamboo.analysis.queries import ProcedureRow
from bamboo.analysis.ranked import ranking_diagnosis
from bamboo.analysis.task_files import TaskFileError, list_task_files, read_task_file
from bamboo.extraction.panda.routing import route_task_data
from bamboo.llm.schema import strict_json_schema
from tests.conftest import EXAMPLES

KEY = b"test-key"


def test_clues_name_nodes_exactly_as_accumulation_does():
    task = json.loads(sorted(EXAMPLES.glob("*.json"))[0].read_text())["task_data"]
    clues = extract_clues(task, KEY)
    routed = route_task_data(task, KEY)
    assert {c.name for c in clues.clues} == {n.name for n in routed.symptoms + routed.features
                                             + routed.context_features + routed.components}
    assert [c.type for c in clues.clues if c.name.startswith("TaskStatus")] == ["status"]
    error = clues.of_type("symptom")
    assert len(error) == 1 and error[0].text and "<" not in error[0].text
    assert clues.task_id == task["jediTaskID"] and clues.status == task["status"]


def test_diagnosis_schema_offers_exactly_the_candidates_novel_and_the_tasks_clues():
    model = answer_model(["Low memory request", "Memory leak"], ["ramCount=2-3GB", "TaskStatusFailed"])
    schema = strict_json_schema(model)
    assert schema["properties"]["cause"]["enum"] == ["Low memory request", "Memory leak", NOVEL]
    assert schema["properties"]["cited_clues"]["items"]["enum"] == ["ramCount=2-3GB", "TaskStatusFailed"]
    assert "resolution" not in schema["properties"], "the resolution shown is the stored one, never asked for"
    ok = model.model_validate({"cause": "Memory leak", "confidence": 0.7, "reason": "", "explanation": "",
                               "cited_clues": ["ramCount=2-3GB"]})
    assert ok.cause == "Memory leak"
    for invented in ({"cause": "Something invented"}, {"cited_clues": ["site=NOWHERE"]}):
        with pytest.raises(ValidationError):
            model.model_validate({"cause": "Memory leak", "confidence": 0.7, "reason": "", "explanation": "",
                                  "cited_clues": [], **invented})


def test_ranking_diagnosis_without_candidates_is_novel():
    d = ranking_diagnosis(Evidence(clues=TaskClues()))
    assert d.is_novel and d.confidence == 0.0 and d.source == "ranking"


def test_procedure_plan_skips_state_changing_code_and_suggests_it():
    rows = [
        ProcedureRow("Check the jobs", "look at failed jobs", 1,
                     "s = await tools.get_task_jobs_summary(task_id=1)\nreturn s"),
        ProcedureRow("Retry the task", "retry", 2, "return await tools.retry_task(task_id=1)"),
        ProcedureRow("Ask the site admins", "prose only", 3, None),
    ]
    plan = plan_procedures("Cause", rows, builtin_catalog({r.name: r.code for r in rows if r.code}))
    by_name = {s.name: s for s in plan.steps}
    assert by_name["Check the jobs"].disposition == "replayable"
    assert by_name["Check the jobs"].allowed_tools == ["get_task_jobs_summary"]
    assert by_name["Retry the task"].disposition == "suggestion"
    assert by_name["Retry the task"].state_changing_tools == ["retry_task"]
    assert by_name["Ask the site admins"].disposition == "manual_step"


def test_incident_files_lose_their_labels_and_bad_files_say_why(tmp_path):
    incident = json.loads(sorted(EXAMPLES.glob("*.json"))[0].read_text())
    (tmp_path / "a.json").write_text(json.dumps(incident))
    task = read_task_file(tmp_path / "a.json")
    assert "resolution_record" not in task and "expected" not in task and task["jediTaskID"]
    (tmp_path / "b.json").write_text("[1, 2]")
    with pytest.raises(TaskFileError, match="expected a JSON object"):
        read_task_file(tmp_path / "b.json")
    (tmp_path / "c.json").write_text('{"jediTaskID": "12"}')
    with pytest.raises(TaskFileError, match="must be an integer"):
        read_task_file(tmp_path / "c.json")
    sources = list_task_files(tmp_path)
    assert [s.task_id for s in sources] == [incident["task_data"]["jediTaskID"], None, None]
    assert sources[0].workflow_id() == f"analyze:{task['jediTaskID']}:{task['status']}"
    assert sources[1].workflow_id() != sources[2].workflow_id()


def test_workflow_id_is_deterministic():
    assert analyze_workflow_id(42, "broken") == "analyze:42:broken"
    assert analyze_workflow_id(42, None) == "analyze:42:unknown"
