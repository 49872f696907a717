"""Look-alike causes (issue 30): two causes that share the task's error symptom and pilot code and tie on
breadth are put in the order of how likely each makes the task's clues, once each was stored often enough;
the ranking's confidence then measures how close their supports are, whichever goes first."""

from __future__ import annotations

from bamboo.analysis.contract import CandidateCause, Clue, Evidence, MatchedClue, TaskClues
from bamboo.analysis.look_alikes import MIN_INCIDENTS, MIN_INCIDENTS_SHARED_CODE, order_look_alikes
from bamboo.analysis.queries import CauseStats, ClueEdge
from bamboo.analysis.ranked import ranking_confidence, ranking_diagnosis
from bamboo.analysis.ranking import operator_first, rank_candidates

SYMPTOM = Clue(type="symptom", kind="Symptom", name="InsufficientMemory", text="pilot:1212 out of memory")
RECO = Clue(type="task_context", kind="Task_Feature", name="processingType=reco")
CORE = Clue(type="task_feature", kind="Task_Feature", name="coreCount=1")
SITE = Clue(type="task_feature", kind="Task_Feature", name="site=PIC_UCORE")
CODE = Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1212")
CLUES = [SYMPTOM, CODE, RECO, CORE, SITE]
REQUEST, RECONSTRUCTION = "Insufficient memory request", "Memory-hungry reconstruction configuration"


def edge(clue: Clue, cause: str, freq: int, total: int) -> ClueEdge:
    return ClueEdge(clue.kind, clue.name, cause, f"{cause} detail", freq, 1.0, total)


def twins(stored: int) -> tuple[list[ClueEdge], dict[str, CauseStats]]:
    """Two causes of the task's symptom and pilot code, each stored `stored` times: reconstruction jobs are most of one's
    incidents and few of the other's, but many other causes run reconstruction too, so the clue's share
    hardly separates them; a site that once came with the request cause gives that one more support."""
    edges = [edge(SYMPTOM, REQUEST, stored, 2 * stored), edge(SYMPTOM, RECONSTRUCTION, stored, 2 * stored),
             edge(CODE, REQUEST, stored, 2 * stored), edge(CODE, RECONSTRUCTION, stored, 2 * stored),
             edge(CORE, REQUEST, stored, 10 * stored), edge(CORE, RECONSTRUCTION, stored, 10 * stored),
             edge(RECO, REQUEST, max(1, stored // 15), 7 * stored),
             edge(RECO, RECONSTRUCTION, stored * 4 // 5, 7 * stored),
             edge(SITE, REQUEST, 1, 1)]
    return edges, {REQUEST: CauseStats(stored, 0, 0, 0), RECONSTRUCTION: CauseStats(stored, 0, 0, 0)}


def test_the_cause_that_makes_the_clues_likelier_goes_first_among_look_alikes():
    edges, stats = twins(30)
    ranked = rank_candidates(CLUES, edges, stats, {})
    assert [c.name for c in ranked] == [RECONSTRUCTION, REQUEST]
    assert ranked[0].breadth == ranked[1].breadth
    assert ranked[0].support < ranked[1].support, "support alone puts the request cause first"


def test_causes_stored_a_few_times_keep_the_supports_order():
    edges, stats = twins(MIN_INCIDENTS_SHARED_CODE - 1)
    assert [c.name for c in rank_candidates(CLUES, edges, stats, {})] == [REQUEST, RECONSTRUCTION]


def test_the_confidence_is_the_contest_of_the_supports_whichever_goes_first():
    edges, stats = twins(30)
    ranked = rank_candidates(CLUES, edges, stats, {})
    support_order = [ranked[1], ranked[0]]
    assert ranked[0].likelier and not support_order[0].likelier
    assert ranking_confidence(ranked) == ranking_confidence(support_order) > 0.5
    said = ranking_diagnosis(Evidence(clues=TaskClues(clues=CLUES), candidates=ranked)).explanation
    assert f"ahead of {REQUEST}" in said and "more typical" in said, "why the one with less support is first"


def test_a_cause_an_operator_put_first_keeps_the_lead_the_ranking_gave_it():
    # Same breadth, less support, first because an operator said so: the ranking's own confidence in it is low.
    edges, stats = twins(MIN_INCIDENTS_SHARED_CODE - 1)
    ranked = rank_candidates(CLUES, edges, stats, {})
    chosen, others = operator_first(ranked, RECONSTRUCTION, "corrected")
    assert chosen[0].name == RECONSTRUCTION and not chosen[0].likelier and "corrected" in others
    assert ranking_confidence(chosen) < 0.5 < ranking_confidence(ranked)


def candidate(name: str, breadth: int, support: float, matched: dict[str, int]) -> CandidateCause:
    return CandidateCause(name=name, breadth=breadth, support=support, frequency=30, confidence=1.0,
                          matched=[MatchedClue(type="task_feature", name=k, edge_frequency=v, share=0.1)
                                   for k, v in matched.items()])


def test_only_look_alikes_are_reordered():
    likely = {SYMPTOM.name: 30, CODE.name: 30, RECO.name: 28, CORE.name: 30}
    unlikely = {SYMPTOM.name: 30, CODE.name: 30, RECO.name: 1, CORE.name: 30, SITE.name: 1}
    counts = {"top": 30, "runner-up": 30}
    top = candidate("top", 3, 1.2, unlikely)
    assert order_look_alikes([top, candidate("runner-up", 3, 1.0, likely)], CLUES, counts)[0].name == "runner-up"
    # another breadth tier: breadth decides
    assert order_look_alikes([top, candidate("runner-up", 2, 1.0, likely)], CLUES, counts)[0].name == "top"
    # the runner-up is not linked to the task's symptom: not a look-alike
    not_linked = {k: v for k, v in likely.items() if k != SYMPTOM.name}
    assert order_look_alikes([top, candidate("runner-up", 3, 1.0, not_linked)], CLUES, counts)[0].name == "top"
    # the runner-up is not linked to the task's pilot code: the code tells them apart, not the weaker clues
    other_code = {k: v for k, v in likely.items() if k != CODE.name}
    assert order_look_alikes([top, candidate("runner-up", 3, 1.0, other_code)], CLUES, counts)[0].name == "top"
    # a task without an error symptom has no strong clue to share
    runner_up = candidate("runner-up", 3, 1.0, likely)
    assert order_look_alikes([top, runner_up], [CODE, RECO, CORE, SITE], counts)[0].name == "top"
    # with the symptom class alone shared (no pilot code either is linked to), the weaker clues decide once each
    # cause was stored MIN_INCIDENTS times, more than when they share a code too
    assert order_look_alikes([top, runner_up], [SYMPTOM, RECO, CORE, SITE], counts)[0].name == "runner-up"
    few = {"top": MIN_INCIDENTS - 1, "runner-up": MIN_INCIDENTS - 1}
    assert order_look_alikes([top, runner_up], [SYMPTOM, RECO, CORE, SITE], few)[0].name == "top"
    assert order_look_alikes([top, runner_up], CLUES, few)[0].name == "runner-up"
    # a clue on most stored incidents weighs nothing: reconstruction alone then cannot swap them
    weights = {RECO.name: 0.0}
    assert order_look_alikes([top, candidate("runner-up", 3, 1.0, likely)], CLUES, counts, weights)[0].name == "top"


def test_a_lone_candidate_is_left_alone():
    only = [candidate("top", 3, 1.0, {SYMPTOM.name: 30})]
    assert order_look_alikes(only, CLUES, {"top": 30}) == only
