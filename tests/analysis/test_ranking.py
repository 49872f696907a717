"""The ranking is a pure function: breadth first (the status is no tier of its own), then support (shares
shrunk by one observation), frequency, confidence; unknown symptoms become novel leads without discarding
the other clues' evidence."""

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
    assert ranked[0].breadth == 2 and ranked[1].breadth == 1


def test_a_cause_never_seen_with_this_status_loses_no_tier():
    # Two causes of one symptom; the right one has more support, but its incidents never had this task's
    # status. Counted as a tier of its own, the status put the weaker cause first.
    fault = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1213")
    edges = [edge(SYMPTOM, "Too many events per job", 2, 4), edge(fault, "Too many events per job", 2, 2),
             edge(SYMPTOM, "Walltime request too short", 2, 4), edge(STATUS, "Walltime request too short", 1, 9),
             edge(CORE, "Walltime request too short", 1, 8)]
    ranked = rank_candidates([SYMPTOM, STATUS, fault, CORE], edges, {}, {})
    assert [c.name for c in ranked] == ["Too many events per job", "Walltime request too short"]


def test_a_clue_seen_once_weighs_less_than_one_seen_every_time():
    # A pseudonymised user who appeared in one incident is all of that clue's evidence (share 1.0), as is
    # a pilot code seen in four incidents of one cause; only the second is evidence worth its share.
    user = Clue(type="task_feature", kind="Task_Feature", name="user=user-0123456789")
    code = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1386")
    edges = [edge(SYMPTOM, "Site in scheduled downtime", 2, 6), edge(user, "Site in scheduled downtime", 1, 1),
             edge(SYMPTOM, "Site misconfiguration", 2, 6), edge(code, "Site misconfiguration", 4, 4)]
    four = {"Site in scheduled downtime": CauseStats(4, 0, 0, 0), "Site misconfiguration": CauseStats(4, 0, 0, 0)}
    ranked = rank_candidates([SYMPTOM, user, code], edges, four, {})
    assert ranked[0].name == "Site misconfiguration"
    assert ranked[0].support > ranked[1].support


def test_support_orders_equal_breadth_and_scores_sum_to_one():
    edges = [edge(SYMPTOM, "Low memory request", 2, 3), edge(SYMPTOM, "Memory leak", 1, 3),
             edge(RAM, "Low memory request", 3, 4), edge(RAM, "Memory leak", 1, 4)]
    three = {"Low memory request": CauseStats(3, 0, 0, 0), "Memory leak": CauseStats(3, 0, 0, 0)}
    ranked = rank_candidates([SYMPTOM, RAM], edges, three, {"Low memory request": ["Raise ramCount"]})
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


def test_a_verdict_counts_for_its_cause_on_the_clues_the_proposal_could_not_explain():
    # Before: an operator's correction only raised a late sort key. Now a verdict "Too many events, not
    # Walltime request too short" on a task with these clues counts as one more incident of the named cause
    # on each clue the proposed cause has no evidence for: here the pilot code, not the shared symptom.
    from bamboo.analysis.queries import VerdictEvidence, clue_key
    from bamboo.analysis.ranking import with_verdicts

    code = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1213")
    clues = [SYMPTOM, code]
    edges = [edge(SYMPTOM, "Walltime request too short", 3, 5), edge(SYMPTOM, "Too many events per job", 2, 5)]
    assert rank_candidates(clues, edges, {}, {})[0].name == "Walltime request too short"
    keys = [clue_key(c.kind, c.name) for c in clues]
    verdicts = VerdictEvidence([(k, "Too many events per job", "Walltime request too short", 2) for k in keys])
    ranked = rank_candidates(clues, with_verdicts(clues, edges, verdicts), {}, {})
    assert ranked[0].name == "Too many events per job"
    assert {(m.name, m.edge_frequency) for m in ranked[0].matched} == {("PayloadOutOfMemory", 2), ("pilotErrorCode=1213", 2)}
    # the shared symptom kept its stored counts: a correction within a symptom class does not claim the class
    assert {(m.name, m.edge_frequency) for m in ranked[1].matched} == {("PayloadOutOfMemory", 3)}
    unknown_proposal = VerdictEvidence([(k, "Too many events per job", None, 2) for k in keys])
    assert with_verdicts(clues, edges, unknown_proposal) == edges
    assert with_verdicts(clues, edges, VerdictEvidence([])) == edges


def test_a_cause_seen_more_often_does_not_win_on_the_clues_it_shares():
    # Two causes of one symptom: one stored six times, one twice. Shares are proportional to how often a
    # cause was stored, so the frequent one outweighed the rare one on every clue they shared (the symptom,
    # the kind of work) although only the rare one has the task's pilot code in all of its incidents.
    code = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1213")
    work = Clue(type="task_context", kind="Task_Feature", name="processingType=evgen")
    edges = [edge(SYMPTOM, "Slow worker nodes at site", 6, 8), edge(work, "Slow worker nodes at site", 5, 7),
             edge(code, "Slow worker nodes at site", 3, 5),
             edge(SYMPTOM, "Too many events per job", 2, 8), edge(work, "Too many events per job", 2, 7),
             edge(code, "Too many events per job", 2, 5)]
    stats = {"Slow worker nodes at site": CauseStats(6, 0, 0, 0), "Too many events per job": CauseStats(2, 0, 0, 0)}
    ranked = rank_candidates([SYMPTOM, work, code], edges, stats, {})
    assert [c.name for c in ranked] == ["Too many events per job", "Slow worker nodes at site"]
    assert ranked[0].frequency == 2 and ranked[1].frequency == 6, "how common a cause is still shows, and breaks ties"


def test_verdicts_add_evidence_without_making_their_cause_more_common():
    # Three corrections put the pilot code on "Too many events per job" (stored twice). Counted as stored
    # incidents of the cause they would divide all of its other clues by five instead of two.
    from bamboo.analysis.queries import VerdictEvidence, clue_key
    from bamboo.analysis.ranking import with_verdicts

    code = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1213")
    clues = [SYMPTOM, CORE, code]
    edges = [edge(SYMPTOM, "Too many events per job", 2, 6), edge(SYMPTOM, "Slow worker nodes", 4, 6),
             edge(CORE, "Slow worker nodes", 4, 8)]
    stats = {"Too many events per job": CauseStats(2, 0, 0, 0), "Slow worker nodes": CauseStats(4, 0, 0, 0)}
    verdicts = VerdictEvidence([(clue_key(code.kind, code.name), "Too many events per job", "Slow worker nodes", 3)])
    ranked = {c.name: c for c in rank_candidates(clues, with_verdicts(clues, edges, verdicts), stats, {})}
    typical = (2 + 4) / 2
    assert ranked["Too many events per job"].support == round((2 / 7 + 3 / 4) * typical / 2, 4)
    assert ranked["Slow worker nodes"].support == round((4 / 7 + 4 / 9) * typical / 4, 4)
