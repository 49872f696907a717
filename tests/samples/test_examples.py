"""The hand-written sample incidents: valid, labelled consistently with the classifier, varied."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from bamboo.extraction.panda.error_classes import classify_error_dialog
from bamboo.models.incident import Incident

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
FILES = sorted(EXAMPLES.glob("*.json"))
MONITOR_HOSTS = {"bigpanda.cern.ch"}
REQUIRED_TASK_FIELDS = {"jediTaskID", "taskName", "status", "errorDialog", "taskType", "processingType",
                        "prodSourceLabel", "ramCount", "coreCount", "walltime", "splitRule", "userName", "vo",
                        "modificationTime", "nJobs", "nJobsFinished", "nJobsFailed"}


def _load(path: Path) -> Incident:
    return Incident.model_validate_json(path.read_text(encoding="utf-8"))


def test_there_are_enough_examples() -> None:
    assert len(FILES) >= 32


def test_file_names_follow_the_numbered_pattern() -> None:
    for path in FILES:
        assert re.fullmatch(r"\d{3}_[a-z0-9_]+\.json", path.name), path.name


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_example_is_a_complete_labelled_incident(path: Path) -> None:
    incident = _load(path)
    task = incident.task_data
    assert REQUIRED_TASK_FIELDS <= set(task), REQUIRED_TASK_FIELDS - set(task)
    assert "site" in task or "includedSite" in task or task["nJobs"] == 0

    expected = incident.expected
    assert expected is not None and set(expected) == {"symptom", "status_symptom", "cause", "features"}
    assert classify_error_dialog(task["errorDialog"]).category == expected["symptom"]
    assert expected["status_symptom"] == "TaskStatus" + task["status"].capitalize()

    record = incident.resolution_record
    assert record is not None and expected["cause"] == record.cause
    assert record.cause[0].isupper() and record.resolution_steps
    assert 2 <= len(record.procedure) <= 4

    for feature in expected["features"]:
        key, value = feature.split("=", 1)
        assert str(task[key]) == value, feature


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_email_thread_is_a_real_thread(path: Path) -> None:
    incident = _load(path)
    senders = re.findall(r"^From: ", incident.email_text, flags=re.MULTILINE)
    assert 2 <= len(senders) <= 5
    assert len(re.findall(r"^Date: ", incident.email_text, flags=re.MULTILINE)) == len(senders)
    assert len(re.findall(r"^Subject: ", incident.email_text, flags=re.MULTILINE)) == len(senders)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_log_links_point_at_the_monitor_only(path: Path) -> None:
    dialog = _load(path).task_data["errorDialog"]
    for url in re.findall(r'href="([^"]+)"', dialog):
        parsed = urlparse(url)
        assert parsed.scheme == "https" and parsed.hostname in MONITOR_HOSTS, url


def test_task_ids_and_incident_ids_are_unique() -> None:
    incidents = [_load(p) for p in FILES]
    task_ids = [i.task_data["jediTaskID"] for i in incidents]
    assert len(set(task_ids)) == len(task_ids)
    assert all(40_000_000 <= t < 41_000_000 for t in task_ids)
    assert len({i.incident_id for i in incidents}) == len(incidents)


def test_causes_are_varied_and_some_recur() -> None:
    causes = collections.Counter(_load(p).resolution_record.cause for p in FILES)
    symptoms = {_load(p).expected["symptom"] for p in FILES}
    assert len(causes) >= 15
    assert sum(1 for n in causes.values() if n >= 2) >= 5
    assert len(symptoms) >= 10
    statuses = {_load(p).task_data["status"] for p in FILES}
    assert {"broken", "failed", "exhausted", "finished"} <= statuses


def test_examples_name_no_machine_paths() -> None:
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w/])/(?:work|root|home|Users)/", text), path.name
        json.loads(text)
