"""The LLM's second opinion on the ranking: a schema that offers exactly the ranked candidates plus "novel".

Constraining the answer to an enum of stored cause names means the chosen cause can be looked up again
without fuzzy matching, and the cited clues are an enum of the task's own clue names, so every piece of
evidence the model points at exists. The model is not asked for a resolution: the one shown is the
stored resolution of the chosen cause. Whether the answer may move the diagnosis away from the ranking's
top candidate is decided by `bamboo.analysis.override`, not by the model. Temperature 0: a diagnosis
should not change between two runs on the same evidence.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from bamboo.analysis.contract import NOVEL, Diagnosis, Evidence
from bamboo.analysis.override import (
    DEFINING_MIN_INCIDENTS, DEFINING_SHARE, MIN_REASON_WORDS, OVERRIDE_MIN_CONFIDENCE, ModelAnswer, judge,
)
from bamboo.llm.client import LLMClient

SCHEMA_NAME = "analysis_diagnosis"
# Every character str.splitlines breaks a line at (each is whitespace to ``\s``). A run of blanks that holds one
# is read run by run (see ``bamboo.frontends.review.one_line``: the pattern ``\s*[breaks]+\s*`` scanned the rest
# of a run of spaces from each of its starts).
_BLANKS = re.compile(r"\s+")
_LINE_BREAK = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
# Bounds on the prompt: the offline model reads about a hundred tokens a second on two cores, and the
# true cause is among the first three candidates in 97% of the benchmark's held-out tasks.
MAX_CANDIDATES_IN_PROMPT = 6
MAX_CLUES_PER_CANDIDATE = 6
MAX_SIMILAR_IN_PROMPT = 3
MAX_CITED_CLUES = 8

SYSTEM = (
    "You review the diagnosis of a failed PanDA task. You are given the task's clues, candidate root causes "
    "ranked by a knowledge graph of past incidents, similar past incidents, and possibly findings of an "
    "investigation. For each candidate, matched_clues maps a clue of the task to [share, incidents]: the share "
    "of that clue's stored evidence that points at the candidate, and how many stored incidents linked them. "
    "The first candidate is the ranking's answer and stands unless the evidence shows otherwise. To choose a "
    f"different candidate, give a confidence of at least {OVERRIDE_MIN_CONFIDENCE}, cite a clue of the task that "
    f"is defining for your choice (share at least {DEFINING_SHARE}, at least {DEFINING_MIN_INCIDENTS} incidents, "
    "a larger share than for the first candidate) and name it in your reason; to answer \"novel\", cite an "
    "error symptom listed in novel_symptoms. Otherwise answer with the first candidate. Give a short "
    "explanation. Answer with JSON only."
)


def answer_model(candidates: list[str], clue_names: list[str] | None = None) -> type[BaseModel]:
    """A pydantic model whose `cause` is an enum of the candidates plus "novel", and whose cited clues are
    an enum of the task's clue names."""
    choices = tuple(dict.fromkeys([*candidates, NOVEL]))
    names = tuple(dict.fromkeys(clue_names or ()))
    clue = Literal[names] if names else str
    # Both enums are built at run time from the candidates, which no static type can spell.
    cause_type: Any = Literal[choices]
    cited_type: Any = list[clue]  # type: ignore[valid-type]  # a run-time Literal
    return create_model(
        "DiagnosisAnswer",
        cause=(cause_type, Field(description="one of the candidate causes, or novel")),
        confidence=(float, Field(ge=0.0, le=1.0)),
        reason=(str, Field(max_length=600, description=(
            "why this cause; to move away from the first candidate, name the clues that point at your choice "
            f"(at least {MIN_REASON_WORDS} words)"))),
        cited_clues=(cited_type, Field(max_length=MAX_CITED_CLUES)),
        explanation=(str, Field(max_length=1200)),
    )


def prompt(evidence: Evidence, extra_context: dict[str, Any]) -> str:
    clues = evidence.clues
    payload = {
        "task": {"jediTaskID": clues.task_id, "status": clues.status, **clues.prose},
        "clues": [{"type": c.type, "name": c.name, **({"text": c.text[:500]} if c.text else {})} for c in clues.clues],
        "candidates": [
            {"rank": i, "name": c.name, "description": c.description[:200], "breadth": c.breadth,
             "support": round(c.support, 2), "frequency": c.frequency, "confirmed_by_operators": c.confirmations,
             **({"error_dialog_wording_match": c.wording} if c.wording is not None else {}),
             "matched_clues": {m.name: [round(m.share, 2), m.edge_frequency]
                               for m in c.matched[:MAX_CLUES_PER_CANDIDATE]}}
            for i, c in enumerate(evidence.candidates[:MAX_CANDIDATES_IN_PROMPT], 1)
        ],
        "novel_symptoms": [n.model_dump() for n in evidence.novel],
        "similar_incidents": [{"graph_id": s.graph_id, "score": s.score, "summary": s.summary[:400]}
                              for s in evidence.similar[:MAX_SIMILAR_IN_PROMPT]],
    }
    if extra_context:
        payload["investigation"] = extra_context
    return json.dumps(payload, default=str)


async def llm_diagnosis(llm: LLMClient, evidence: Evidence, extra_context: dict[str, Any] | None = None) -> Diagnosis:
    names = [c.name for c in evidence.candidates[:MAX_CANDIDATES_IN_PROMPT]]
    model = answer_model(names, [c.name for c in evidence.clues.clues])
    answer = await llm.structured(system=SYSTEM, user=prompt(evidence, extra_context or {}), output=model,
                                  name=SCHEMA_NAME)
    fields = answer.model_dump()
    fields["reason"] = one_line(fields["reason"])
    return judge(evidence, ModelAnswer.model_validate(fields))


def one_line(reason: str) -> str:
    """The model's reason on one line: each line break (with the blanks around it) becomes one space.

    The reason is shown after "Chosen by:" in every front end; with line breaks in it, it printed lines of its
    own, a forged "Resolution (stored, ...)" or "Chosen by: an operator". Collapsed rather than refused, so a
    sound answer written over two lines still counts; the spaces inside a line stay, so a clue name it quotes
    is still found in it."""
    return _BLANKS.sub(lambda run: " " if _LINE_BREAK.search(run.group()) else run.group(), reason).strip()
