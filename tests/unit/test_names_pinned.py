"""Workflow and activity names are compatibility data: a rename would orphan running histories."""

from temporalio import activity, workflow

from activities.accumulate import AccumulateActivities
from workflows.accumulate import AccumulateIncident
from workflows.populate import PopulateBatch


def test_workflow_names():
    assert workflow._Definition.must_from_class(AccumulateIncident).name == "AccumulateIncident"
    assert workflow._Definition.must_from_class(PopulateBatch).name == "PopulateBatch"


def test_activity_names():
    names = {activity._Definition.must_from_callable(getattr(AccumulateActivities, m)).name
             for m in ("load_incident", "extract_incident", "review_extraction", "store_graph",
                       "list_incident_sources", "read_incident_sources", "accumulate_chunk", "load_prior_attempt")}
    assert names == {"load_incident", "extract_incident", "review_extraction", "store_graph",
                     "list_incident_sources", "read_incident_sources", "accumulate_chunk", "load_prior_attempt"}


def test_signal_names():
    from workflows import names

    assert (names.LANE_RELEASED_SIGNAL, names.LANE_PROGRESS_SIGNAL) == ("lane_released", "lane_progress")


def test_update_and_query_names():
    from workflows import names

    assert (names.CLAIM_SLICE_UPDATE, names.SLICE_DONE_UPDATE, names.HELD_SLICES_QUERY) == (
        "claim_slice", "slice_done", "held_slices")


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
