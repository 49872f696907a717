"""Who decided an analysis's cause and what its confidence means: one reading of the result for every renderer.

The CLI, the bot and any other view of an `AnalysisResult` print these lines instead of composing their
own. Each used to read a different field: after an operator's correction the CLI printed "confidence 1.00
(ranking margin)" and "Chosen by: the ranking; the model agreed" while the result said the operator decided
and the ranking's margin was 0.63 (issue 30). Here the decider is read from `cause_source` (with the
operator's verdict), the confidence is labelled with what it measures, and the model's part — agreed,
refused, overrode, pending, too slow, failed — is said once.

The lines are plain text and hold the model's words (its cause, its reason): each renderer passes them
through its own sanitiser (`bamboo/frontends/inert_text.py`). Pure, so any front end may import it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from bamboo.analysis.contract import AnalysisResult

Decider = Literal["ranking", "model_override", "operator_correction", "operator_confirmation", "operator"]


class Provenance(BaseModel):
    """What a reader is told about who decided, one line each."""

    decided_by: Decider
    chosen_by: str
    confidence: str
    model: str
    first_answer: str = ""


def decider(result: AnalysisResult) -> Decider:
    if result.cause_source == "operator":
        if result.operator_verdict == "corrected":
            return "operator_correction"
        if result.operator_verdict == "confirmed":
            return "operator_confirmation"
        return "operator"
    return result.cause_source


def confidence_label(result: AnalysisResult) -> str:
    """The confidence shown, with what it measures; the ranking's own (its calibrated lead) beside any other kind."""
    margin = f"ranking confidence {result.ranking_confidence:.2f}"
    who = decider(result)
    if who.startswith("operator"):
        return f"{result.confidence:.2f} (operator's verdict on this task; {margin})"
    if who == "model_override":
        return f"{result.confidence:.2f} (model override; {margin})"
    if not result.candidates:
        return f"{result.confidence:.2f} (no stored cause matches any clue)"
    return f"{result.confidence:.2f} (ranking confidence)"


def model_part(result: AnalysisResult) -> str:
    """What became of the model's second opinion, as a clause."""
    deadline = f"{result.model_deadline_s:g} s"
    if result.model_status == "pending":
        return f"the model's second opinion is pending (at most {deadline} per step)"
    if result.model_status == "too_slow":
        return f"the model was skipped: it did not answer within the {deadline} deadline (BAMBOO_LLM_TIMEOUT_S)"
    if result.model_status == "budget_spent":
        return "the model was not consulted: the model budget is spent"
    proposal = result.model_proposal
    if proposal is None:
        return "the model was not consulted (its step failed: see the notes)"
    if proposal.verdict == "agreed":
        return "the model agreed"
    if proposal.verdict == "override_accepted":
        return f"the model chose {proposal.cause} at {proposal.confidence:.2f}"
    return (f"the model proposed {proposal.cause} at {proposal.confidence:.2f}, not taken because "
            f"{proposal.verdict_reason}")


def chosen_by(result: AnalysisResult) -> str:
    """Who decided the cause, then what the model said about it."""
    who = decider(result)
    if who == "model_override":
        top = result.candidates[0].name if result.candidates else "the ranking's top candidate"
        return (f"the model, overriding the ranking's {top} (ranking confidence {result.ranking_confidence:.2f}): "
                f"{result.override_reason}")
    if who == "operator_correction":
        head = f"an operator, who corrected this task's analysis to {result.root_cause}"
    elif who == "operator_confirmation":
        head = f"an operator, who confirmed {result.root_cause} for this task"
    elif who == "operator":
        head = f"an operator's verdict on this task ({result.root_cause})"
    else:
        head = "the ranking"
    return f"{head}; {model_part(result)}"


def provenance(result: AnalysisResult) -> Provenance:
    first = ("first answer, from the ranking alone: the model's second opinion may still refine it"
             if result.answer == "first" else "")
    return Provenance(decided_by=decider(result), chosen_by=chosen_by(result), confidence=confidence_label(result),
                      model=model_part(result), first_answer=first)
