"""An escalated outcome's reason is capped like every other outcome's: outcomes ride in
heartbeats, the slice's result and the batch's pending escalations, whose payloads Temporal limits to 2 MiB."""

from __future__ import annotations

import pytest

from bamboo.accumulation.contract import ItemOutcome, SliceResult
from bamboo.accumulation.slice_learner import _escalation_reason
from bamboo.models.incident import IncidentSource
from bamboo.models.review import ReviewOutcome

LONG = "é" * 300  # two bytes a character in the payload


@pytest.mark.parametrize("review,prefix", [
    (ReviewOutcome(approved=False, issues=[LONG] * 3), "review rejected: "),
    (ReviewOutcome(approved=False, hard_failures=[LONG] * 3), "review rejected: "),
    (ReviewOutcome(approved=True, human_input_needed=[LONG] * 3), "needs human input: "),
    (ReviewOutcome(approved=True, reviewer_error=LONG), "reviewer failed: "),
])
def test_every_escalation_reason_is_capped(review, prefix):
    why = _escalation_reason(review)
    assert why is not None and why.startswith(prefix + "é") and len(why) <= 300


def test_a_short_reason_is_kept_whole_and_an_approval_has_none():
    assert _escalation_reason(ReviewOutcome(approved=False, issues=["a", "b"])) == "review rejected: a; b"
    assert _escalation_reason(ReviewOutcome(approved=True)) is None


def test_a_full_slice_of_escalations_stays_under_the_payload_limit():
    path = "/eos/atlas/atlascerngroupdisk/adc-ops/incidents/2026/batch-0042/incident-0000000.json"
    why = _escalation_reason(ReviewOutcome(approved=False, issues=[LONG] * 3))
    outcomes = [ItemOutcome(index=i, status="escalated", reason=why, source=IncidentSource(path=path),
                            prior_ref="b" * 64) for i in range(1024)]
    assert len(SliceResult(outcomes=outcomes).model_dump_json().encode()) < 2 * 2**20 * 0.6
