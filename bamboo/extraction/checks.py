"""Hard checks on an extracted graph: no judgement needed, so they run anywhere, including inside
a workflow (they are pure functions of the graph)."""

from __future__ import annotations

from bamboo.models.graph import KnowledgeGraph
from bamboo.models.review import ReviewOutcome

NO_PROCEDURE = "no investigation procedure captured"
HUMAN_ONLY_GAPS = (NO_PROCEDURE,)


def hard_checks(graph: KnowledgeGraph) -> list[str]:
    failures = []
    if not graph.of_kind("Symptom"):
        failures.append("no Symptom extracted: the task has no errorDialog or status")
    if not graph.of_kind("Cause"):
        failures.append("no Cause extracted: the email does not state what went wrong")
    if not graph.of_kind("Procedure"):
        failures.append(NO_PROCEDURE)
    dangling = graph.validate_refs()
    if dangling:
        failures.append(f"edges point at missing nodes: {dangling[:3]}")
    return failures


def checked_outcome(graph: KnowledgeGraph, source: str) -> ReviewOutcome | None:
    """The verdict when hard checks alone decide it; None when the LLM reviewer must look.

    Blocking failures reject. A human-reviewed resolution record that passes is approved without an
    LLM second opinion, which would add cost, not knowledge.
    """
    return outcome_of_checks(hard_checks(graph), source)


def outcome_of_checks(failures: list[str], source: str) -> ReviewOutcome | None:
    """`checked_outcome` for failures already computed, so a caller that also needs them runs the checks once."""
    human = [f for f in failures if f in HUMAN_ONLY_GAPS]
    blocking = [f for f in failures if f not in HUMAN_ONLY_GAPS]
    if blocking:
        return ReviewOutcome(approved=False, issues=blocking, hard_failures=blocking, human_input_needed=human,
                             feedback="Fix: " + "; ".join(blocking))
    if source == "resolution_record":
        return ReviewOutcome(approved=True, human_input_needed=human, llm_reviewed=False)
    return None
