"""Analysis workflow and activity names are compatibility data: a rename would orphan running histories."""

from temporalio import activity, workflow

from activities.analyze import AnalyzeActivities
from bamboo.analysis import contract
from bamboo.contract import activity_name
from workflows.analyze import AnalyzeTask
from workflows.batch_analyze import BatchAnalyze
from worker.registry import WORKFLOWS

STUBS = ("gather_evidence", "diagnose", "plan_exploration", "procedure_plan", "email", "list_tasks", "read_tasks")


def test_workflow_names_are_pinned_and_registered():
    assert workflow._Definition.must_from_class(AnalyzeTask).name == contract.ANALYZE_WORKFLOW == "AnalyzeTask"
    assert workflow._Definition.must_from_class(BatchAnalyze).name == contract.BATCH_ANALYZE_WORKFLOW == "BatchAnalyze"
    assert AnalyzeTask in WORKFLOWS and BatchAnalyze in WORKFLOWS
    batch = workflow._Definition.must_from_class(BatchAnalyze)
    assert set(batch.signals) == set(contract.BATCH_SIGNALS) and contract.PROGRESS_QUERY in batch.queries


def test_activity_names_are_pinned_and_implemented_under_the_contracts_name():
    assert [activity_name(getattr(contract, m)) for m in STUBS] == [f"analysis_{m}" for m in STUBS]
    for m in STUBS:
        assert activity._Definition.must_from_callable(getattr(AnalyzeActivities, m)).name == f"analysis_{m}"


def test_the_first_answer_query_is_pinned():
    """Clients read the ranking's first answer through this query while the model runs."""
    assert contract.RESULT_QUERY == "result" and contract.RESULT_QUERY in workflow._Definition.must_from_class(
        AnalyzeTask).queries
