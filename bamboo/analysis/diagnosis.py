"""The LLM diagnosis: a schema that offers exactly the ranked candidate causes plus "novel".

Constraining the answer to an enum of stored cause names means the chosen cause can be looked up
again (for its resolution and procedures) without fuzzy matching (upstream: the prompt asked the model
to copy the name character for character, then matched it exactly). Temperature 0: a diagnosis should
not change between two runs on the same evidence.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from bamboo.analysis.models import NOVEL, Diagnosis, Evidence
from bamboo.analysis.ranked import novel_label
from bamboo.llm.client import LLMClient

SCHEMA_NAME = "analysis_diagnosis"
MAX_CANDIDATES_IN_PROMPT = 8

SYSTEM = (
    "You diagnose a failed PanDA task. You are given the task's clues, candidate root causes ranked by a "
    "knowledge graph of past incidents (with the clues that point at each and how often), similar past "
    "incidents, and possibly findings of an investigation. Choose the candidate cause that best explains "
    "the clues, or \"novel\" if none does. Give a confidence between 0 and 1, the resolution to apply, a short "
    "explanation and the specific evidence you relied on. Answer with JSON only."
)


def answer_model(candidates: list[str]) -> type[BaseModel]:
    """A pydantic model whose `cause` is an enum of the candidates plus "novel"."""
    choices = tuple(dict.fromkeys([*candidates, NOVEL]))
    return create_model(
        "DiagnosisAnswer",
        cause=(Literal[choices], Field(description="one of the candidate causes, or novel")),
        confidence=(float, Field(ge=0.0, le=1.0)),
        resolution=(str, Field(max_length=1000)),
        explanation=(str, Field(max_length=2000)),
        supporting_evidence=(list[str], Field(max_length=10)),
    )


def prompt(evidence: Evidence, extra_context: dict[str, Any]) -> str:
    clues = evidence.clues
    payload = {
        "task": {"jediTaskID": clues.task_id, "status": clues.status, **clues.prose},
        "clues": [{"type": c.type, "name": c.name, **({"text": c.text[:500]} if c.text else {})} for c in clues.clues],
        "candidates": [
            {"name": c.name, "description": c.description[:300], "breadth": c.breadth, "support": c.support,
             "frequency": c.frequency, "confirmed_by_operators": c.confirmations,
             "matched_clues": [m.name for m in c.matched[:8]], "resolutions": c.resolutions[:3]}
            for c in evidence.candidates[:MAX_CANDIDATES_IN_PROMPT]
        ],
        "novel_symptoms": [n.model_dump() for n in evidence.novel],
        "similar_incidents": [{"graph_id": s.graph_id, "score": s.score, "summary": s.summary}
                              for s in evidence.similar],
    }
    if extra_context:
        payload["investigation"] = extra_context
    return json.dumps(payload, default=str)


async def llm_diagnosis(llm: LLMClient, evidence: Evidence, extra_context: dict[str, Any] | None = None) -> Diagnosis:
    names = [c.name for c in evidence.candidates[:MAX_CANDIDATES_IN_PROMPT]]
    model = answer_model(names)
    answer = await llm.structured(system=SYSTEM, user=prompt(evidence, extra_context or {}), output=model,
                                  name=SCHEMA_NAME)
    if answer.cause == NOVEL:
        return Diagnosis(root_cause=novel_label(evidence), is_novel=True, confidence=answer.confidence,
                         resolution=answer.resolution, explanation=answer.explanation,
                         supporting_evidence=list(answer.supporting_evidence), source="llm")
    chosen = next(c for c in evidence.candidates if c.name == answer.cause)
    return Diagnosis(root_cause=chosen.name, confidence=answer.confidence,
                     resolution=answer.resolution.strip() or (chosen.resolutions[0] if chosen.resolutions else ""),
                     explanation=answer.explanation, supporting_evidence=list(answer.supporting_evidence),
                     source="llm")
