"""PanDA extraction: deterministic routing of task fields plus LLM reading of the email thread.

When the incident carries a reviewed resolution record, the record is the truth: its labels are
used verbatim and the LLM may only propose canonical wording, which is accepted only if it stays
recognisably the same label (shared content words). A tiny local model therefore cannot corrupt a
knowledge base built from reviewed records.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bamboo.extraction.base import ExtractionResult
from bamboo.extraction.labels import normalise_label
from bamboo.extraction.llm_schemas import CanonicalLabels, EmailExtraction
from bamboo.extraction.panda.routing import TaskClues, dialog_head, route_task_data, strip_html
from bamboo.llm.client import LLMClient
from bamboo.models.graph import GraphEdge, GraphNode, KnowledgeGraph, PassageDraft
from bamboo.models.labels import contradicts
from bamboo.models.incident import Incident

MAX_EMAIL_CHARS_FOR_PROMPT = 12_000
# Investigation steps one resolution record contributes (an email's extraction keeps 8): each step is a Procedure
# node, matched against the store and sent to the model; a runbook pasted as 1,000 steps made a thousand nodes.
MAX_RECORD_PROCEDURES = 20

EMAIL_SYSTEM = (
    "You read a resolved PanDA incident email thread and extract what was wrong, how it was fixed and how it "
    "was investigated. Use short generic labels without task ids, dates or people. Answer with JSON only."
)
CANON_SYSTEM = (
    "You normalise labels for a knowledge graph. Keep each label's meaning and key words; remove task ids, "
    "dates and people; 2-8 words. Answer with JSON only."
)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on for and or with by from at is was be per".split())


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def accept_canonical(original: str, proposed: str) -> str:
    """The proposed label if it is a re-wording of a reviewed record's label, else the record's wording.

    A re-wording is accepted when it is still a short label (no longer than the original plus two words,
    at most eight), keeps at least half of the original's content words, adds at most one new one, and
    does not swap a direction or a negation. The offline model turned "Renew the VOMS proxy and retry"
    into "Retry the task after expiration of the proxy" (half the words kept, the meaning reversed), and
    an 80-character cut dropped the site that distinguished a cause: labels now keep 120 characters."""
    proposed_clean = normalise_label(proposed)
    base = normalise_label(original)
    want = _content_words(base)
    if not proposed_clean or not want:
        return base
    if len(proposed_clean.split()) > max(8, len(base.split()) + 2) or len(proposed_clean.split()) > len(base.split()) + 2:
        return base
    got = _content_words(proposed_clean)
    kept = len(want & got) / len(want)
    if kept < 0.5 or len(got - want) > 1 or contradicts(base, proposed_clean):
        return base
    return proposed_clean


class PandaExtractionStrategy:
    name = "panda"

    def __init__(self, llm: LLMClient, pseudonym_key: bytes) -> None:
        self._llm = llm
        self._key = pseudonym_key

    def _clues(self, incident: Incident) -> TaskClues:
        return route_task_data(incident.task_data, self._key)

    def prefetch_hints(self, incident: Incident) -> dict[str, Any]:
        return self._hints(self._clues(incident))

    @staticmethod
    def _hints(clues: TaskClues) -> dict[str, Any]:
        return {
            "symptoms": [s.name for s in clues.symptoms],
            "features": [f.name for f in clues.features + clues.context_features],
            "skipped_fields": clues.skipped,
        }

    async def extract(self, incident: Incident, *, feedback: str = "", exploration: dict[str, Any] | None = None) -> ExtractionResult:
        clues = self._clues(incident)
        notes = [f"skipped {s}" for s in clues.skipped]
        if incident.resolution_record is not None:
            cause, resolution, procedures = await self._from_record(incident, feedback)
            source = "resolution_record"
            if len(incident.resolution_record.procedure) > MAX_RECORD_PROCEDURES:
                notes.append(f"kept the first {MAX_RECORD_PROCEDURES} of the record's "
                             f"{len(incident.resolution_record.procedure)} investigation steps")
        elif incident.email_text.strip():
            cause, resolution, procedures = await self._from_email(incident, feedback, exploration)
            source = "email"
        else:
            cause, resolution, procedures = None, None, []
            source = "none"
            notes.append("no resolution record and no email: only task-data clues extracted")
        graph = self._assemble(clues, cause, resolution, procedures)
        passages = self._passages(incident, clues, cause, resolution)
        summary = self._summary(clues, cause, resolution, procedures)
        return ExtractionResult(graph=graph, passages=passages, summary=summary, notes=notes, source=source,
                                hints=self._hints(clues))

    async def _from_record(self, incident: Incident, feedback: str):
        record = incident.resolution_record
        assert record is not None
        steps = record.procedure[:MAX_RECORD_PROCEDURES]
        ask = {"cause": record.cause, "resolution": record.resolution, "procedures": steps}
        if feedback:
            ask["reviewer_feedback"] = feedback
        labels = await self._llm.structured(system=CANON_SYSTEM, user=json.dumps(ask), output=CanonicalLabels,
                                            name="canonical_labels")
        cause = GraphNode(kind="Cause", name=accept_canonical(record.cause, labels.cause),
                          description=normalise_label(record.cause_detail or record.cause, limit=2000),
                          props={"source": "resolution_record", "reviewed_by": record.reviewed_by})
        resolution = GraphNode(kind="Resolution", name=accept_canonical(record.resolution, labels.resolution),
                               description="; ".join(record.resolution_steps)[:2000] or record.resolution,
                               props={"steps": record.resolution_steps})
        procedures: list[tuple[GraphNode, list[str]]] = []
        previous: str | None = None
        proposed = list(labels.procedures) + [""] * len(steps)
        for step, label in zip(steps, proposed):
            node = GraphNode(kind="Procedure", name=accept_canonical(step, label), description=step[:2000],
                             props={"source": "resolution_record"})
            procedures.append((node, [previous] if previous else []))
            previous = node.name
        return cause, resolution, procedures

    async def _from_email(self, incident: Incident, feedback: str, exploration: dict[str, Any] | None):
        task = {k: incident.task_data.get(k) for k in ("status", "errorDialog", "processingType", "site") if k in incident.task_data}
        dialog = task.get("errorDialog")
        if isinstance(dialog, str):
            task["errorDialog"] = dialog_head(dialog)  # what routing read, not megabytes of it
        ask: dict[str, Any] = {
            "task": task,
            "email": incident.email_text[:MAX_EMAIL_CHARS_FOR_PROMPT],
        }
        if feedback:
            ask["reviewer_feedback"] = feedback
        if exploration:
            ask["additional_context"] = exploration
        out = await self._llm.structured(system=EMAIL_SYSTEM, user=json.dumps(ask, default=str), output=EmailExtraction,
                                         name="email_extraction")
        cause = GraphNode(kind="Cause", name=normalise_label(out.cause.name, 120) or "Unknown cause",
                          description=out.cause.description[:2000], props={"source": "email"})
        resolution = GraphNode(kind="Resolution", name=normalise_label(out.resolution.name, 120) or "Unknown resolution",
                               description=out.resolution.description[:2000])
        procedures = []
        for item in out.procedures[:8]:
            name = normalise_label(item.name, 120)
            if name:
                procedures.append((GraphNode(kind="Procedure", name=name, description=item.description[:2000],
                                             props={"source": "email"}),
                                   [normalise_label(d, 120) for d in item.depends_on if d.strip()]))
        return cause, resolution, procedures

    @staticmethod
    def _assemble(clues: TaskClues, cause: GraphNode | None, resolution: GraphNode | None,
                  procedures: list[tuple[GraphNode, list[str]]]) -> KnowledgeGraph:
        graph = KnowledgeGraph()
        symptoms = [graph.add_node(s) for s in clues.symptoms]
        features = [graph.add_node(f) for f in clues.features]
        contexts = [graph.add_node(f) for f in clues.context_features]
        components = [graph.add_node(c) for c in clues.components]
        primary = next((s for s in symptoms if not s.name.startswith("TaskStatus")), symptoms[0] if symptoms else None)
        if primary is not None:
            for ctx in contexts:
                graph.add_edge(GraphEdge(src=ctx, kind="associated_with", dst=primary, confidence=0.5))
        if cause is None:
            return graph
        cref = graph.add_node(cause)
        for s in symptoms:
            graph.add_edge(GraphEdge(src=s, kind="indicate", dst=cref, confidence=1.0 if s == primary else 0.5))
        for f in features:
            graph.add_edge(GraphEdge(src=f, kind="contribute_to", dst=cref, confidence=0.5))
        for c in components:
            graph.add_edge(GraphEdge(src=c, kind="originated_from", dst=cref, confidence=0.5))
        if resolution is not None:
            graph.add_edge(GraphEdge(src=cref, kind="solved_by", dst=graph.add_node(resolution)))
        names = set()
        for node, _deps in procedures:
            pref = graph.add_node(node)
            names.add(pref.name)
            graph.add_edge(GraphEdge(src=cref, kind="investigated_by", dst=pref, params={"order": len(names)}))
        for node, deps in procedures:
            for dep in deps:
                if dep in names and dep != node.name:
                    graph.add_edge(GraphEdge(src=node.ref, kind="depends_on",
                                             dst=GraphNode(kind="Procedure", name=dep).ref))
        return graph

    @staticmethod
    def _passages(incident: Incident, clues: TaskClues, cause: GraphNode | None, resolution: GraphNode | None) -> list[PassageDraft]:
        out: list[PassageDraft] = []
        for s in clues.symptoms:
            if s.name.startswith("TaskStatus"):
                continue
            content = strip_html(s.props.get("raw_description", s.description))[:2000]
            out.append(PassageDraft(section="Symptom", key=s.name, content=content, node=s.ref))
        for key, text in clues.prose.items():
            out.append(PassageDraft(section="Task_Context", key=key, content=text))
        if cause is not None:
            out.append(PassageDraft(section="Cause", key=cause.name, content=f"{cause.name}. {cause.description}"[:2000], node=cause.ref))
        return out

    @staticmethod
    def _summary(clues: TaskClues, cause: GraphNode | None, resolution: GraphNode | None,
                 procedures: list[tuple[GraphNode, list[str]]]) -> str:
        parts = []
        sym = [s for s in clues.symptoms if not s.name.startswith("TaskStatus")]
        if sym:
            parts.append(f"Symptom {sym[0].name}: {sym[0].description[:300]}")
        ctx = [f.name for f in clues.context_features][:6]
        if ctx:
            parts.append("Context: " + ", ".join(ctx))
        if cause:
            parts.append(f"Cause: {cause.name}")
        if resolution:
            parts.append(f"Resolution: {resolution.name}")
        if procedures:
            parts.append("Investigation: " + "; ".join(p.name for p, _ in procedures))
        return ". ".join(parts)
