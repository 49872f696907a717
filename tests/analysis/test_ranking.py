"""The ranking is a pure function: breadth first, then support, frequency, confidence; unknown symptoms
become novel leads without discarding the other clues' evidence."""

from __future__ import annotations

from bamboo.analysis.contract import Clue
from bamboo.analysis.queries import CauseStats, ClueEdge
from bamboo.analysis.ranking import novel_leads, rank_candidates

SYMPTOM = Clue(type="symptom", kind="Symptom", name="PayloadOutOfMemory", text="killed: out of memory")
STATUS = Clue(type="status", kind="Symptom", name="TaskStatusFailed")
RAM = Clue(type="task_feature", kind="Task_Feature", name="ramCount=1-2GB")
CORE = Clue(type="task_feature", kind="Task_Feature", name="coreCount=1")
UNKNOWN = Clue(type="symptom", kind="Symptom", name="UnclassifiedNeverSeen", text="something new")


def edge(clue: Clue, cause: str, freq: int, total: int, conf: float = 1.0) -> ClueEdge:
    return ClueEdge(clue.kind, clue.name, cause, f"{cause} detail", freq, conf, total)


def test_breadth_beats_frequency():
    edges = [edge(STATUS, "Site outage", 40, 50), edge(CORE, "Site outage", 30, 40),
             edge(SYMPTOM, "Low memory request", 2, 3), edge(STATUS, "Low memory request", 2, 50),
             edge(RAM, "Low memory request", 2, 2)]
    ranked = rank_candidates([SYMPTOM, STATUS, RAM, CORE], edges, {}, {})
    assert [c.name for c in ranked] == ["Low memory request", "Site outage"]
    assert ranked[0].breadth == 3 and ranked[1].breadth == 2


def test_support_orders_equal_breadth_and_scores_sum_to_one():
    edges = [edge(SYMPTOM, "Low memory request", 2, 3), edge(SYMPTOM, "Memory leak", 1, 3),
             edge(RAM, "Low memory request", 3, 4), edge(RAM, "Memory leak", 1, 4)]
    ranked = rank_candidates([SYMPTOM, RAM], edges, {}, {"Low memory request": ["Raise ramCount"]})
    assert [c.name for c in ranked] == ["Low memory request", "Memory leak"]
    assert ranked[0].support > ranked[1].support
    assert ranked[0].resolutions == ["Raise ramCount"]
    assert abs(sum(c.score for c in ranked) - 1.0) < 1e-3


def test_operator_confirmations_raise_frequency_and_break_ties():
    edges = [edge(SYMPTOM, "A cause", 1, 2), edge(SYMPTOM, "B cause", 1, 2)]
    assert rank_candidates([SYMPTOM], edges, {}, {})[0].name == "A cause"  # alphabetical on a full tie
    stats = {"B cause": CauseStats(incidents=1, confirmations=2, proposed=2, proposed_correct=1)}
    ranked = rank_candidates([SYMPTOM], edges, stats, {})
    assert ranked[0].name == "B cause"
    assert ranked[0].frequency == 3 and ranked[0].confirmations == 2
    assert ranked[0].resolution_success_rate == 0.5


def test_unknown_symptom_is_a_novel_lead_and_other_evidence_survives():
    edges = [edge(STATUS, "Low memory request", 2, 5), edge(RAM, "Low memory request", 2, 2)]
    clues = [UNKNOWN, STATUS, RAM]
    ranked = rank_candidates(clues, edges, {}, {})
    leads = novel_leads(clues, {})
    assert [c.name for c in ranked] == ["Low memory request"]
    assert [lead.symptom for lead in leads] == ["UnclassifiedNeverSeen"]
    assert leads[0].reason == "symptom never seen before"


def test_symptom_stored_without_cause_is_also_novel():
    assert novel_leads([SYMPTOM], {"PayloadOutOfMemory": 0})[0].reason == "symptom seen, but no cause recorded"
    assert novel_leads([SYMPTOM, STATUS], {"PayloadOutOfMemory": 2}) == []
