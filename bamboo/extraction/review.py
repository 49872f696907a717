"""The quality gate between extraction and storage.

Hard checks run first because they need no judgement: a graph without a Symptom, a Cause and a
Procedure cannot help a future diagnosis. Then the LLM looks for gaps. A reviewer malfunction
never blocks accumulation (fail-open) but is recorded, so nobody mistakes it for an approval.
"""

from __future__ import annotations

import json
import logging

from bamboo.extraction.checks import HUMAN_ONLY_GAPS, hard_checks, outcome_of_checks
from bamboo.extraction.llm_schemas import ReviewVerdict
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError
from bamboo.models.graph import KnowledgeGraph
from bamboo.models.review import ReviewOutcome

log = logging.getLogger(__name__)

REVIEW_SYSTEM = (
    "You review a knowledge graph extracted from a resolved PanDA incident. Flag only gaps implied by the graph "
    "itself or by the task fields given (a symptom with no cause, a vague node name, a cause with no resolution). "
    "Do not speculate. Approve when nothing is missing. Answer with JSON only."
)


async def review_graph(llm: LLMClient, graph: KnowledgeGraph, task_fields: dict, source: str = "") -> ReviewOutcome:
    failures = hard_checks(graph)
    decided = outcome_of_checks(failures, source)
    if decided is not None:
        return decided
    human = [f for f in failures if f in HUMAN_ONLY_GAPS]
    compact = {
        "nodes": [{"kind": n.kind, "name": n.name} for n in graph.nodes if n.kind != "Task_Feature"][:40],
        "edges": [f"{e.src.kind}:{e.src.name} -{e.kind}-> {e.dst.kind}:{e.dst.name}" for e in graph.edges
                  if e.kind != "contribute_to"][:40],
        "task": task_fields,
    }
    try:
        verdict = await llm.structured(system=REVIEW_SYSTEM, user=json.dumps(compact, default=str),
                                       output=ReviewVerdict, name="review_verdict")
    except LLMError as exc:
        if exc.retryable:
            raise  # a transient outage is Temporal's to retry, not an approval
        log.warning("reviewer failed, approving fail-open: %s", exc)
        return ReviewOutcome(approved=True, reviewer_error=str(exc)[:500], human_input_needed=human)
    return ReviewOutcome(approved=verdict.approved, issues=[i[:300] for i in verdict.issues[:10]],
                         feedback=verdict.feedback[:1000], human_input_needed=human)
