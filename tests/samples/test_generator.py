"""The synthetic incident generator: determinism, balance, classifier agreement, learnable features, I/O."""

from __future__ import annotations

import collections
import json
import string
from pathlib import Path

import pytest

from bamboo.extraction.panda.error_classes import classify_error_dialog
from bamboo.models.incident import Incident
from bamboo.samples import cause_families, generate_incidents, read_incidents, write_incidents
from bamboo.samples.templates import CAUSES

_SIGNATURE_KEYS = ("processingType", "coreCount", "site", "includedSite", "transUses", "prodSourceLabel",
                   "architecture", "splitRule", "ramCount", "walltime", "outDiskCount", "gshare", "nucleus")


def _dump(incidents: list[Incident]) -> str:
    return json.dumps([i.model_dump(mode="json") for i in incidents], sort_keys=True)


def test_same_seed_gives_identical_output() -> None:
    assert _dump(generate_incidents(40, seed=3)) == _dump(generate_incidents(40, seed=3))


def test_different_seeds_give_different_output() -> None:
    assert _dump(generate_incidents(40, seed=3)) != _dump(generate_incidents(40, seed=4))


def test_catalogue_has_at_least_eight_families_of_two_or_three_causes() -> None:
    families = cause_families()
    assert len(families) >= 8
    assert all(2 <= len(causes) <= 3 for causes in families.values()), families
    labels = [c.cause for c in CAUSES]
    assert len(labels) == len(set(labels)), "cause labels must be unique ground-truth labels"


def test_every_template_dialog_classifies_to_its_family() -> None:
    values = collections.defaultdict(lambda: "X", {
        "tid": 41000001, "pandaid": 6500000001, "site": "MWT2_UCORE", "ram": 2000, "ram_fixed": 3500,
        "maxpss": 2600, "walltime": 3600, "events": 1000, "nfailed": 12, "nlost": 3,
        "lfn": "EVNT.38000001._000001.pool.root.1", "release": "Athena,24.0.53",
        "architecture": "x86_64-el9-gcc13-opt", "cores": 64, "nfiles": 500,
    })
    formatter = string.Formatter()
    for template in CAUSES:
        for dialog in template.dialogs:
            rendered = formatter.vformat(dialog, (), values)
            assert classify_error_dialog(rendered).category == template.family, (template.cause, rendered)


def test_generated_incidents_are_valid_and_labelled_consistently() -> None:
    incidents = generate_incidents(len(CAUSES) * 4, seed=21)
    for incident in incidents:
        Incident.model_validate(incident.model_dump(mode="json"))
        expected = incident.expected or {}
        task = incident.task_data
        assert classify_error_dialog(task["errorDialog"]).category == expected["symptom"]
        assert expected["cause"] == incident.resolution_record.cause
        assert expected["status_symptom"] == "TaskStatus" + task["status"].capitalize()
        for feature in expected["features"]:
            key, value = feature.split("=", 1)
            assert str(task[key]) == value
        assert 2 <= len(incident.resolution_record.procedure) <= 4
        assert f"Subject: Task {task['jediTaskID']}" in incident.email_text


def test_identifiers_are_unique_and_outside_the_examples_range() -> None:
    incidents = generate_incidents(500, seed=5)
    task_ids = [i.task_data["jediTaskID"] for i in incidents]
    assert len(set(task_ids)) == len(task_ids)
    assert all(41_000_000 <= t < 50_000_000 for t in task_ids)
    assert len({i.incident_id for i in incidents}) == len(incidents)


@pytest.mark.parametrize("n", [len(CAUSES) - 5, 100, 157])
def test_cause_labels_are_balanced(n: int) -> None:
    counts = collections.Counter(i.resolution_record.cause for i in generate_incidents(n, seed=9))
    if n >= len(CAUSES):
        assert set(counts) == {c.cause for c in CAUSES}
    assert max(counts.values()) - min(counts.values()) <= 1


def test_zero_noise_keeps_every_signature_feature() -> None:
    by_cause = {c.cause: c for c in CAUSES}
    for incident in generate_incidents(len(CAUSES) * 3, seed=2, noise=0.0):
        template = by_cause[incident.resolution_record.cause]
        for key, choices in template.signature.items():
            assert incident.task_data[key] in choices, (template.cause, key)


def test_full_noise_breaks_some_signature_features() -> None:
    by_cause = {c.cause: c for c in CAUSES}
    broken = sum(
        incident.task_data[key] not in choices
        for incident in generate_incidents(len(CAUSES) * 3, seed=2, noise=1.0)
        for key, choices in by_cause[incident.resolution_record.cause].signature.items()
    )
    assert broken > 0


def _feature_vote_accuracy(noise: float) -> float:
    """Train feature->cause counts on 70%, predict the held-out 30% within each symptom family."""
    incidents = generate_incidents(450, seed=11, noise=noise)
    train, test = incidents[:315], incidents[315:]
    families: dict[str, set[str]] = collections.defaultdict(set)
    feature_counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    cause_counts: collections.Counter[str] = collections.Counter()
    for incident in train:
        cause = incident.resolution_record.cause
        families[incident.expected["symptom"]].add(cause)
        cause_counts[cause] += 1
        for key in _SIGNATURE_KEYS:
            if key in incident.task_data:
                feature_counts[(cause, key, str(incident.task_data[key]))] += 1

    def score(cause: str, task: dict) -> float:
        return sum(feature_counts[(cause, k, str(task[k]))] / cause_counts[cause] for k in _SIGNATURE_KEYS if k in task)

    hits = 0
    for incident in test:
        candidates = sorted(families[incident.expected["symptom"]])
        best = max(candidates, key=lambda c: score(c, incident.task_data))
        hits += best == incident.resolution_record.cause
    return hits / len(test)


def test_features_let_a_simple_ranking_tell_causes_apart_and_noise_hurts() -> None:
    clean, default, heavy = (_feature_vote_accuracy(x) for x in (0.0, 0.2, 0.6))
    assert default >= 0.75, default
    assert clean >= default >= heavy
    assert clean > heavy


def test_jsonl_round_trip(tmp_path: Path) -> None:
    incidents = generate_incidents(12, seed=1)
    path = write_incidents(incidents, tmp_path / "corpus.jsonl")
    assert len(path.read_text(encoding="utf-8").splitlines()) == 12
    assert _dump(read_incidents(path)) == _dump(incidents)


def test_directory_round_trip(tmp_path: Path) -> None:
    incidents = generate_incidents(12, seed=1)
    target = write_incidents(incidents, tmp_path / "corpus")
    assert len(list(target.glob("*.json"))) == 12
    assert _dump(read_incidents(target)) == _dump(incidents)


def test_bad_arguments_are_refused_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n must be"):
        generate_incidents(-1, seed=0)
    with pytest.raises(ValueError, match="noise must be"):
        generate_incidents(3, seed=0, noise=1.5)
    with pytest.raises(ValueError, match=".jsonl"):
        write_incidents(generate_incidents(1, seed=0), tmp_path / "corpus.csv")
