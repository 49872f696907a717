"""Analysis workflow and activity names are compatibility data: a rename would orphan running histories."""

from temporalio import activity, workflow

from activities.analyze import AnalyzeActivities
from workflows import names
from workflows.analyze import AnalyzeTask, BatchAnalyze
from worker.registry import WORKFLOWS


def test_workflow_names_are_pinned_and_registered():
    assert workflow._Definition.must_from_class(AnalyzeTask).name == names.ANALYZE_WORKFLOW == "AnalyzeTask"
    assert workflow._Definition.must_from_class(BatchAnalyze).name == names.BATCH_ANALYZE_WORKFLOW == "BatchAnalyze"
    assert AnalyzeTask in WORKFLOWS and BatchAnalyze in WORKFLOWS


def test_activity_names_are_pinned():
    got = {activity._Definition.must_from_callable(getattr(AnalyzeActivities, m)).name
           for m in ("gather_evidence", "diagnose", "procedure_plan", "email", "list_tasks", "read_tasks")}
    assert got == {names.ANALYSIS_GATHER_EVIDENCE, names.ANALYSIS_DIAGNOSE, names.ANALYSIS_PROCEDURE_PLAN,
                   names.ANALYSIS_EMAIL, names.ANALYSIS_LIST_TASKS, names.ANALYSIS_READ_TASKS}
    assert names.ANALYSIS_GATHER_EVIDENCE == "analysis_gather_evidence"
