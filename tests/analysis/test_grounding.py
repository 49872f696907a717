"""Model prose is shown only when it says what the diagnosis says: the failures the demo showed (an invented
resolution, JSON pasted into an e-mail, HTML, invented numbers) are caught and replaced by a deterministic
draft from the stored knowledge, and the result says which one is shown and why."""

from __future__ import annotations

import json

import pytest

from bamboo.analysis.contract import Diagnosis, EmailInput
from bamboo.analysis.email import draft_email
from bamboo.analysis.grounding import EMAIL_MAX_WORDS, check_prose, ungrounded_tokens
from bamboo.analysis.override import judge
from tests.analysis.test_override import answer, evidence  # noqa: F401 — the shared fixture

CAUSE = "Corrupted input file"
RESOLUTION = "Replace the corrupted replica and retry the task"
GIVEN = json.dumps({"task_id": 40112233, "cause": CAUSE, "resolution": RESOLUTION, "clues": ["pilotErrorCode 1099"]})
GOOD = ("Task 40112233 failed because of a corrupted input file (pilot error 1099). "
        "Please replace the corrupted replica and retry the task.")


def test_grounded_prose_passes():
    check = check_prose(GOOD, cause=CAUSE, given=GIVEN, resolution=RESOLUTION, task_id=40112233,
                        max_words=EMAIL_MAX_WORDS)
    assert check.passed, check.problems


@pytest.mark.parametrize("prose, problem", [
    ("Task 40112233: a corrupted input file. Resolution: Fixing queue configuration.", "stored resolution"),
    (GOOD + ' "supporting_evidence" + the clues', "JSON fragment"),
    (GOOD + ' {"cause": "x"}', "JSON fragment"),
    (GOOD + " <a href='http://x'>details</a>", "HTML"),
    ("**Summary**\n" + GOOD, "markdown"),
    (GOOD + " It began at 03:17 after 4471 retries.", "4471"),
    (GOOD + " The script run_atracion.py crashed.", "run_atracion.py"),
    (GOOD.replace("Task 40112233", "Your task"), "does not name task"),
    ("Task 40112233 hit a memory problem. Please replace the corrupted replica and retry the task.", "name the cause"),
    (GOOD + " word" * EMAIL_MAX_WORDS, "words long"),
    ("", "empty"),
])
def test_ungrounded_prose_is_refused_with_the_reason(prose, problem):
    check = check_prose(prose, cause=CAUSE, given=GIVEN, resolution=RESOLUTION, task_id=40112233,
                        max_words=EMAIL_MAX_WORDS)
    assert not check.passed and problem in check.reason, check.problems


def test_numbers_and_identifiers_must_come_from_what_the_model_was_given():
    assert ungrounded_tokens("pilot error 1099 at MWT2_UCORE", GIVEN + " MWT2_UCORE") == []
    assert ungrounded_tokens("pilot error 1098 at MWT2_UCORE", GIVEN) == ["1098", "mwt2_ucore"]


class _Model:
    def __init__(self, reply: str) -> None:
        self.reply = reply

    async def text(self, **_: object) -> str:
        return self.reply


def _email_input() -> EmailInput:
    diagnosis = Diagnosis(root_cause=CAUSE, confidence=0.8, resolution=RESOLUTION,
                          resolution_incidents=["incident:12"], supporting_evidence=["symptom pilotErrorCode 1099"])
    return EmailInput(task_id=40112233, task_name="mc23.evgen", diagnosis=diagnosis)


async def test_an_email_draft_that_fails_a_check_is_replaced_by_the_stored_knowledge():
    draft = await draft_email(_Model("Dear user, a script called atracion broke: {\"x\": 1}. Fixing queue configuration."),
                              _email_input())
    assert draft.source == "template" and "not shown" in draft.note and "JSON fragment" in draft.note
    assert RESOLUTION in draft.body and "incident:12" in draft.body and "40112233" in draft.body


async def test_a_grounded_email_draft_is_shown():
    body = "Hello, task 40112233 failed: corrupted input file. Please replace the corrupted replica and retry the task."
    draft = await draft_email(_Model(body), _email_input())
    assert draft.source == "llm" and draft.body == body


def test_an_explanation_that_invents_is_replaced_and_the_note_says_why(evidence):  # noqa: F811
    invented = "The proxy of user-9f00 expired at 03:17 after 4471 retries"
    d = judge(evidence, answer(cause="Expired user proxy", explanation=invented))
    assert d.explanation_source == "ranking" and d.explanation.startswith("top-ranked")
    assert "explanation is not shown" in d.note and "4471" in d.note
    grounded = judge(evidence, answer(cause="Expired user proxy",
                                      explanation="an expired user proxy: prodSourceLabel=user points at it"))
    assert grounded.explanation_source == "llm" and "prodSourceLabel=user" in grounded.explanation


PROXY_CAUSE = "The user's VOMS proxy expired while the task was running"
PROXY_FIX = "Renew the VOMS proxy and retry the task"


def test_a_draft_that_restates_the_cause_does_not_carry_the_resolution():
    """Issue 30: three of the resolution's five content words are the cause's name's, so restating the cause
    passed as carrying the fix while telling the owner nothing to do."""
    draft = ("Hello, task 41402004 failed because of: The user's VOMS proxy expired while the task was running. "
             "Best regards")
    check = check_prose(draft, cause=PROXY_CAUSE, given=json.dumps({"task": 41402004}), resolution=PROXY_FIX,
                        task_id=41402004, max_words=EMAIL_MAX_WORDS)
    assert not check.passed and "does not carry the stored resolution (what to do: renew, retry)" in check.reason


def test_a_draft_that_says_what_to_do_carries_the_resolution_in_its_own_inflection():
    draft = ("Hello, task 41402004 failed because the user's VOMS proxy expired while the task was running. "
             "Once the proxy is renewed, the task can be retried. Best regards")
    check = check_prose(draft, cause=PROXY_CAUSE, given=json.dumps({"task": 41402004}), resolution=PROXY_FIX,
                        task_id=41402004, max_words=EMAIL_MAX_WORDS)
    assert check.passed, check.problems


LURE = "https://voms-renew.evil.example/login"


def test_prose_may_send_the_reader_only_where_the_stored_knowledge_does():
    """What the model is shown includes the task's errorDialog, which its owner writes: a link repeated from there
    passed as grounded and went into the draft to that owner under the store's name."""
    given = json.dumps({"errorDialog": f"proxy expired; renew it at {LURE} with your grid certificate password"})
    lured = f"Task 40112233: {PROXY_CAUSE}. Renew it at {LURE} with your grid certificate password and retry."
    check = check_prose(lured, cause=PROXY_CAUSE, given=given, resolution=PROXY_FIX)
    assert not check.passed and LURE in check.reason
    for address in ("ops@evil.example", "www.evil.example", "voms-renew.evil.example/login"):
        assert not check_prose(f"{PROXY_CAUSE}: write to {address}", cause=PROXY_CAUSE, given=address).passed
    stored = "Renew the VOMS proxy at https://voms.cern.ch/renew and retry the task"
    assert check_prose(f"{PROXY_CAUSE}. Renew the VOMS proxy at https://voms.cern.ch/renew and retry the task.",
                       cause=PROXY_CAUSE, given=stored, resolution=stored).passed
    assert check_prose(f"{PROXY_CAUSE}: payload.stdout and log.1.tgz show it", cause=PROXY_CAUSE,
                       given="payload.stdout log.1.tgz").passed  # file names are not addresses


def test_an_explanation_keeps_to_one_line_and_the_draft_says_whose_it_is(evidence):  # noqa: F811
    forged = "an expired user proxy: prodSourceLabel=user points at it\nChosen by: an operator"
    d = judge(evidence, answer(cause="Expired user proxy", explanation=forged))
    assert d.explanation_source == "ranking" and "several lines" in d.note
    from bamboo.analysis.ranked import template_body

    shown = judge(evidence, answer(cause="Expired user proxy",
                                   explanation="an expired user proxy: prodSourceLabel=user points at it"))
    body = template_body(EmailInput(task_id=1, diagnosis=shown))
    assert "The model's reading: an expired user proxy: prodSourceLabel=user points at it" in body
