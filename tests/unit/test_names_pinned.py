"""Workflow, activity, signal and query names are compatibility data: a rename would orphan running
histories. The populate/accumulate ones live in `bamboo.accumulation.contract`; this pins them."""

from temporalio import activity, workflow

from activities.accumulate import AccumulateActivities
from bamboo.accumulation import contract
from bamboo.contract import activity_name
from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch

ACTIVITIES = {"load_incident", "extract_incident", "review_extraction", "store_graph", "list_incident_sources",
              "read_incident_sources", "plan_review_exploration", "learn_slice", "load_prior_attempt"}


def test_workflow_names():
    assert workflow._Definition.must_from_class(AccumulateIncident).name == "AccumulateIncident"
    assert workflow._Definition.must_from_class(PopulateBatch).name == "PopulateBatch"


def test_activity_names_and_every_implementation_names_its_stub():
    implemented = {activity._Definition.must_from_callable(getattr(AccumulateActivities, m)).name for m in ACTIVITIES}
    assert implemented == ACTIVITIES
    assert {activity_name(getattr(contract, m)) for m in ACTIVITIES} == ACTIVITIES


def test_signal_and_query_names():
    definition = workflow._Definition.must_from_class(PopulateBatch)
    assert set(definition.signals) == {"pause", "resume", "cancel"}
    assert set(definition.queries) == {"progress"}
    assert not definition.updates, "a batch takes no updates: slices report once, by their result"


def test_import_rules():
    """policy imports nothing of the project; bamboo never imports workflows or worker."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    for f in (root / "policy").rglob("*.py"):
        assert not re.search(r"^\s*(from|import)\s+(bamboo|workflows|activities|worker)\b", f.read_text(), re.M), f
    for f in (root / "bamboo").rglob("*.py"):
        assert not re.search(r"^\s*(from|import)\s+(workflows|worker)\b", f.read_text(), re.M), f
    for f in (root / "workflows").rglob("*.py"):
        text = f.read_text()
        assert not re.search(r"^\s*(from|import)\s+(httpx|psycopg|openai|subprocess|socket|requests)\b", text, re.M), f
        assert not re.search(r"^\s*(from|import)\s+activities\b", text, re.M), f
