"""Clue extraction for analysis: the accumulation routing, called read-only.

Analysis must name a clue exactly as accumulation named the node it stored, so it calls the same
deterministic `route_task_data` and nothing else — no LLM, no canonicalisation that could write a
label (an earlier analysis, "read-only" by intent, canonicalised clue labels and so wrote their vectors
to the store).
The generic TaskStatus symptom gets its own clue type: it indicates almost every cause, so counting
it as the same evidence type as the error dialog would let it stand in for the dialog in the breadth.
Context features (the kind of work: processingType, prodSourceLabel, ...) are stored linked to the
symptom, not the cause, so they are their own clue type, matched through the incidents they came from.
"""

from __future__ import annotations

from typing import Any

from bamboo.analysis.contract import Clue, TaskClues
from bamboo.extraction.panda.routing import route_task_data, strip_html

STATUS_PREFIX = "TaskStatus"


def extract_clues(task: dict[str, Any], pseudonym_key: bytes) -> TaskClues:
    routed = route_task_data(task, pseudonym_key)
    clues: list[Clue] = []
    for s in routed.symptoms:
        if s.name.startswith(STATUS_PREFIX):
            clues.append(Clue(type="status", kind="Symptom", name=s.name))
        else:
            raw = str(s.props.get("raw_description") or s.description)
            clues.append(Clue(type="symptom", kind="Symptom", name=s.name, text=strip_html(raw)[:2000]))
    clues += [Clue(type="task_feature", kind="Task_Feature", name=f.name) for f in routed.features]
    clues += [Clue(type="task_context", kind="Task_Feature", name=f.name) for f in routed.context_features]
    clues += [Clue(type="component", kind="Component", name=c.name) for c in routed.components]
    task_id = task.get("jediTaskID")
    status = task.get("status")
    return TaskClues(
        task_id=task_id if isinstance(task_id, int) else None,
        status=status if isinstance(status, str) else None,
        clues=clues,
        prose=routed.prose,
        skipped=routed.skipped,
    )
