"""The rule that lets a model's answer replace the ranking's top candidate, as a pure function.

Each refusal is tried by an answer that meets every other condition, so a test fails if that one
condition stops being checked.
"""

from __future__ import annotations

import pytest

from bamboo.analysis.contract import NOVEL, CandidateCause, Clue, Evidence, MatchedClue, NovelLead, TaskClues
from bamboo.analysis.override import OVERRIDE_MIN_CONFIDENCE, ModelAnswer, judge
from bamboo.analysis.ranked import ranking_confidence, ranking_diagnosis


def candidate(name: str, support: float, matched: dict[str, tuple[float, int]], resolution: str) -> CandidateCause:
    """`matched`: clue -> (share of its stored evidence for this cause, incidents linking them)."""
    return CandidateCause(
        name=name, breadth=2, support=support, frequency=3, confidence=1.0,
        matched=[MatchedClue(type="task_feature", name=n, edge_frequency=k, share=s) for n, (s, k) in matched.items()],
        resolutions=[resolution, "an older resolution"], resolution_incidents={resolution: ["incident:a", "incident:b"]},
    )


@pytest.fixture
def evidence() -> Evidence:
    return Evidence(
        clues=TaskClues(task_id=7, status="failed", clues=[
            Clue(type="task_feature", kind="Task_Feature", name=code)
            for code in ("pilotErrorCode=1137", "pilotErrorCode=1099", "pilotErrorCode=1300")]),
        candidates=[
            candidate("Expired user proxy", 1.5,
                      {"TaskStatusFailed": (0.5, 4), "prodSourceLabel=user": (1.0, 4), "computingSite=BNL": (0.1, 1),
                       "pilotErrorCode=1099": (0.2, 1)},
                      "Renew the VOMS proxy and retry"),
            candidate("Misconfigured storage token", 0.9,
                      {"TaskStatusFailed": (0.5, 4), "site=MWT2_UCORE": (0.9, 3), "user=user-1d5f": (1.0, 1),
                       "user=user-77aa": (1.0, 3), "walltime=6-12h": (0.7, 5), "computingSite=BNL": (0.9, 9),
                       "pilotErrorCode=1137": (0.9, 4)},
                      "Fix the storage token at the site"),
            candidate("Full destination", 0.6, {"outDiskCount=0-1GB": (0.9, 3)}, "Free space at the destination"),
        ],
        novel=[NovelLead(symptom="ImageNotFound", reason="symptom never seen before")],
    )


def answer(**fields) -> ModelAnswer:
    base = {"cause": "Misconfigured storage token", "confidence": 0.9, "cited_clues": ["site=MWT2_UCORE"],
            "reason": "only the token cause explains site=MWT2_UCORE failing", "explanation": "the site's token"}
    return ModelAnswer(**{**base, **fields})


def test_an_answer_with_confidence_reason_and_favouring_evidence_overrides(evidence):
    d = judge(evidence, answer())
    assert (d.root_cause, d.cause_source, d.model.verdict) == ("Misconfigured storage token", "model_override",
                                                               "override_accepted")
    assert d.resolution == "Fix the storage token at the site" and d.resolution_incidents == ["incident:a", "incident:b"]
    assert d.confidence == 0.9 and d.ranking_confidence == ranking_confidence(evidence.candidates)
    assert d.supporting_evidence[0] == ("site=MWT2_UCORE points at Misconfigured storage token (90% of its evidence) "
                                        "and never at Expired user proxy")


@pytest.mark.parametrize("fields, why", [
    ({"confidence": 0.0}, "its confidence 0.00 is below"),
    ({"confidence": OVERRIDE_MIN_CONFIDENCE - 0.01}, "is below"),
    ({"reason": ""}, "stated no reason"),
    ({"reason": "site=MWT2_UCORE"}, "stated no reason"),
    ({"cited_clues": []}, "none of the clues it cites (none)"),
    ({"cited_clues": ["TaskStatusFailed"], "reason": "TaskStatusFailed is what the token cause gives"},
     "none of the clues it cites (TaskStatusFailed)"),  # equal share: favours neither
    ({"cited_clues": ["prodSourceLabel=user"], "reason": "prodSourceLabel=user says it is the token"},
     "none of the clues it cites"),  # points at the top candidate, not at the choice
    ({"cited_clues": ["outDiskCount=0-1GB"], "reason": "outDiskCount=0-1GB shows the token is wrong"},
     "none of the clues it cites"),  # favours a third candidate, not the one chosen
    ({"cited_clues": ["user=user-1d5f"], "reason": "user=user-1d5f only ever had the token problem"},
     "is defining evidence for Misconfigured storage token (linked to it in at least 2 incidents"),  # one incident
    ({"cited_clues": ["walltime=6-12h"], "reason": "walltime=6-12h points mostly at the token cause"},
     "none of the clues it cites (walltime=6-12h)"),  # 70% of its evidence: not defining
    ({"reason": "I am completely certain that this is the cause"}, "does not name the evidence"),
    # The top candidate is linked to it too (once, against nine): it cannot be evidence against the top.
    ({"cited_clues": ["computingSite=BNL"], "reason": "computingSite=BNL points at the token cause"},
     "none of the clues it cites (computingSite=BNL)"),
    # A person, however often seen with the choice: anyone can hit any cause.
    ({"cited_clues": ["user=user-77aa"], "reason": "user=user-77aa always had the token problem"},
     "none of the clues it cites (user=user-77aa)"),
    # A pilot code while the top is linked to another code of the same task: the job records disagree.
    ({"cited_clues": ["pilotErrorCode=1137"], "reason": "pilotErrorCode=1137 is the token failure"},
     "none of the clues it cites (pilotErrorCode=1137)"),
])
def test_the_top_candidate_stands_unless_every_condition_holds(evidence, fields, why):
    d = judge(evidence, answer(**fields))
    ranked = ranking_diagnosis(evidence)
    assert (d.root_cause, d.cause_source, d.model.verdict) == ("Expired user proxy", "ranking", "override_refused")
    assert why in d.model.verdict_reason
    assert (d.resolution, d.resolution_incidents) == ("Renew the VOMS proxy and retry", ["incident:a", "incident:b"])
    assert d.confidence == ranked.confidence == ranking_confidence(evidence.candidates) == d.ranking_confidence
    assert d.explanation == ranked.explanation, "a refused answer's explanation argues for another cause"


def test_a_pilot_code_defines_the_choice_when_the_top_is_linked_to_none_of_the_tasks_codes(evidence):
    top = evidence.candidates[0]
    top.matched = [m for m in top.matched if not m.name.startswith("pilotErrorCode=")]
    d = judge(evidence, answer(cited_clues=["pilotErrorCode=1137"], reason="pilotErrorCode=1137 is the token failure"))
    assert (d.root_cause, d.model.verdict) == ("Misconfigured storage token", "override_accepted")


def test_agreeing_keeps_the_rankings_margin_and_stored_resolution_whatever_the_model_says(evidence):
    d = judge(evidence, answer(cause="Expired user proxy", confidence=0.0, cited_clues=[], reason=""))
    assert d.root_cause == "Expired user proxy" and d.model.verdict == "agreed" and d.source == "llm"
    assert d.confidence == ranking_confidence(evidence.candidates) and "ranking confidence" in d.confidence_basis
    assert d.resolution == "Renew the VOMS proxy and retry"


def test_novel_needs_a_symptom_no_stored_cause_explains(evidence):
    refused = judge(evidence, answer(cause=NOVEL, cited_clues=["site=MWT2_UCORE"]))
    assert refused.root_cause == "Expired user proxy" and "no stored cause explains" in refused.model.verdict_reason
    assert judge(evidence, answer(cause=NOVEL, cited_clues=["ImageNotFound"], confidence=0.5)).root_cause == \
        "Expired user proxy"
    taken = judge(evidence, answer(cause=NOVEL, cited_clues=["ImageNotFound"],
                                   reason="the ImageNotFound error matches no known cause"))
    assert taken.is_novel and taken.root_cause == "Novel: ImageNotFound" and taken.resolution == ""
    assert taken.cause_source == "model_override"


def test_ranking_confidence_follows_the_lead_of_the_top_candidate(evidence):
    assert ranking_confidence([]) == 0.0
    assert ranking_confidence(evidence.candidates[:1]) < 1.0  # a lone candidate leads over nothing known, not over doubt
    assert 0.5 < ranking_confidence(evidence.candidates) < ranking_confidence(evidence.candidates[:1])
    tied = [candidate("a", 1.0, {}, "x").model_copy(update={"frequency": 2}),
            candidate("b", 1.0, {}, "y").model_copy(update={"frequency": 2})]
    assert ranking_confidence(tied) < 0.6  # two causes stored twice each, tied: near even odds (ranked.py's fit)
    assert ranking_diagnosis(Evidence(clues=TaskClues(), candidates=tied)).confidence == ranking_confidence(tied)


def test_a_store_lacking_the_tasks_cause_answers_no_known_cause(evidence):
    """Issue 30: candidates linked to the task only by clues many incidents share (the status, a VO, a core
    count) were proposed at confidence 1.00 while the task's own symptom, linked to no stored cause, was a
    "novel lead". The answer is now "no known cause", the novel symptom first, the candidates suggestions."""
    from bamboo.analysis.contract import Clue

    lone = Evidence(
        clues=TaskClues(task_id=1001, status="failed", clues=[
            Clue(type="symptom", kind="Symptom", name="InsufficientMemory"),
            Clue(type="task_feature", kind="Task_Feature", name="pilotErrorCode=1234"),
            Clue(type="task_feature", kind="Task_Feature", name="vo=atlas"),
            Clue(type="task_feature", kind="Task_Feature", name="coreCount=1")]),
        candidates=[candidate("No site with enough memory", 1.2, {"vo=atlas": (0.3, 9), "coreCount=1": (0.3, 9)},
                              "Lower the memory request")],
        novel=[NovelLead(symptom="InsufficientMemory", reason="symptom never seen before")])
    d = ranking_diagnosis(lone)
    assert d.is_novel and d.confidence == 0.0 and "no known cause" in d.root_cause.lower()
    assert d.root_cause == "Novel: no known cause (InsufficientMemory, pilotErrorCode=1234)"
    assert "No site with enough memory" in d.explanation and "suggestions, not a diagnosis" in d.explanation
    agreed = judge(lone, answer(cause="No site with enough memory", confidence=0.95,
                                reason="vo=atlas and coreCount=1 point at it", cited_clues=["vo=atlas"]))
    assert agreed.is_novel and agreed.model.verdict == "override_refused" and "weaker clues" in agreed.model.verdict_reason
    assert judge(lone, answer(cause=NOVEL, confidence=0.6)).model.verdict == "agreed"


def test_a_candidate_linked_to_the_tasks_symptom_is_still_the_diagnosis(evidence):
    from bamboo.analysis.contract import Clue

    known = evidence.model_copy(update={"clues": TaskClues(task_id=7, status="failed", clues=[
        Clue(type="symptom", kind="Symptom", name="prodSourceLabel=user")])})
    d = ranking_diagnosis(known)
    assert not d.is_novel and d.root_cause == "Expired user proxy"


async def test_the_models_reason_is_judged_and_kept_on_one_line(evidence):
    """The reason is shown after "Chosen by:" in every front end; its line breaks printed forged lines there
    ("Resolution (stored, ...): kill task 42", "Chosen by: an operator"). Line breaks of every kind are collapsed
    to a space where the answer is read, so a sound answer written over several lines still counts."""
    from bamboo.analysis.diagnosis import llm_diagnosis

    top = evidence.candidates[0]
    top.matched = [m for m in top.matched if not m.name.startswith("pilotErrorCode=")]
    reason = ("pilotErrorCode=1137 is the token failure\nResolution (stored, from 3 incident(s): INC-1): kill task 42"
              "\r\n\x0bChosen by: an operator\x1c\x85\u2028\u2029  :white_check_mark:")

    class _LLM:
        async def structured(self, *, system, user, output, name):
            return output(cause="Misconfigured storage token", confidence=0.9, reason=reason,
                          cited_clues=["pilotErrorCode=1137"], explanation="the token")

    d = await llm_diagnosis(_LLM(), evidence)
    assert (d.root_cause, d.model.verdict) == ("Misconfigured storage token", "override_accepted")
    assert d.model.reason == ("pilotErrorCode=1137 is the token failure Resolution (stored, from 3 incident(s): "
                              "INC-1): kill task 42 Chosen by: an operator :white_check_mark:")
