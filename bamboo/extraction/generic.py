"""A strategy for workload systems without a dedicated integration.

Scalar task fields become features, a status becomes a status symptom, an error-like field becomes
a symptom named after its first words, and the email thread is read by the LLM as for PanDA.
"""

from __future__ import annotations

from typing import Any

import re
from bamboo.extraction.panda.routing import TaskClues, dialog_head
from bamboo.extraction.panda.strategy import PandaExtractionStrategy
from bamboo.llm.client import LLMClient
from bamboo.models.graph import GraphNode
from bamboo.models.incident import Incident, status_problem

ERROR_KEYS = ("errorDialog", "error", "last_error", "error_message", "failure_reason")


def _generic_clues(task: dict[str, Any]) -> TaskClues:
    clues = TaskClues()
    for key in ERROR_KEYS:
        text = task.get(key)
        if isinstance(text, str) and (text := dialog_head(text)).strip():  # an error field may hold megabytes
            words = re.findall(r"[A-Za-z]+", text)[:4]
            name = "".join(w.capitalize() for w in words) or "UnnamedError"
            clues.symptoms.append(GraphNode(kind="Symptom", name=name, description=text[:500],
                                            props={"raw_description": text[:2000]}))
            break
    status = task.get("status")
    if isinstance(status, str) and status.strip() and status_problem(status) is None:
        clues.symptoms.append(GraphNode(kind="Symptom", name=f"TaskStatus{re.sub(r'[^A-Za-z0-9]', '', status.title())}"))
    for key, value in sorted(task.items()):
        if key in ERROR_KEYS or key == "status" or isinstance(value, (dict, list)) or value in (None, ""):
            continue
        if isinstance(value, str) and len(value) > 80:
            clues.prose[key] = value[:1000]
            continue
        clues.features.append(GraphNode(kind="Task_Feature", name=f"{key}={value}"[:300],
                                        props={"attribute": key, "value": str(value)}))
    return clues


class GenericLLMExtractionStrategy(PandaExtractionStrategy):
    name = "llm"

    def __init__(self, llm: LLMClient) -> None:
        super().__init__(llm, pseudonym_key=b"")

    def _clues(self, incident: Incident) -> TaskClues:
        return _generic_clues(incident.task_data)
