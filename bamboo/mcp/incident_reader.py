"""A ``KnowledgeReader`` over resolved incident files, so ``bamboo mcp serve`` works without a database.

Matching is lexical (word overlap), which is honest for a few hundred reviewed incidents; the store
backed reader does the semantic version.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from pydantic import ValidationError

from bamboo.mcp.knowledge_server import CauseMatch, IncidentMatch, ProcedureMatch
from bamboo.models.incident import Incident

_WORD_RE = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on for and or is was were be by with at from this that it as not no".split())


def words(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in _STOP and len(w) > 1}


def overlap(query: set[str], doc: set[str]) -> float:
    """Share of the query's words found in the document: a symptom phrase should be covered, not equal."""
    return len(query & doc) / len(query) if query else 0.0


class IncidentFileKnowledgeReader:
    def __init__(self, incidents: list[Incident]) -> None:
        self.incidents = [i for i in incidents if i.resolution_record is not None]
        self._docs = {i.incident_id: words(self._text(i)) for i in self.incidents}

    @classmethod
    def from_dir(cls, directory: Path) -> "IncidentFileKnowledgeReader":
        incidents = []
        for path in sorted(Path(directory).glob("*.json")):
            try:
                incidents.append(Incident.model_validate_json(path.read_text()))
            except (ValidationError, OSError):
                continue
        return cls(incidents)

    @staticmethod
    def _text(incident: Incident) -> str:
        record = incident.resolution_record
        parts = [str(incident.task_data.get("errorDialog") or ""), incident.email_text[:4000]]
        if record is not None:
            parts += [record.cause, record.cause_detail]
        return " ".join(parts)

    def _ranked(self, text: str) -> list[tuple[float, Incident]]:
        query = words(text)
        scored = [(overlap(query, self._docs[i.incident_id]), i) for i in self.incidents]
        return sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1].incident_id))

    async def causes_for_symptom(self, symptom: str, limit: int) -> list[CauseMatch]:
        best: dict[str, CauseMatch] = {}
        for score, incident in self._ranked(symptom):
            record = incident.resolution_record
            assert record is not None
            match = best.get(record.cause)
            if match is None:
                best[record.cause] = CauseMatch(cause=record.cause, detail=record.cause_detail,
                                                score=round(score, 3), incident_count=1)
            else:
                match.incident_count += 1
        return sorted(best.values(), key=lambda m: (-m.score, -m.incident_count))[:limit]

    async def similar_incidents(self, description: str, limit: int) -> list[IncidentMatch]:
        out = []
        for score, incident in self._ranked(description)[:limit]:
            record = incident.resolution_record
            assert record is not None
            summary = str(incident.task_data.get("errorDialog") or incident.email_text[:200])
            out.append(IncidentMatch(incident_id=incident.incident_id, summary=re.sub(r"<[^>]+>", "", summary)[:300],
                                     cause=record.cause, resolution=record.resolution, score=round(score, 3)))
        return out

    async def procedures_for_cause(self, cause: str, limit: int) -> list[ProcedureMatch]:
        query = words(cause)
        uses: dict[tuple[str, tuple[str, ...]], int] = defaultdict(int)
        for incident in self.incidents:
            record = incident.resolution_record
            assert record is not None
            if record.procedure and overlap(query, words(record.cause)) >= 0.5:
                uses[(record.cause, tuple(record.procedure))] += 1
        ranked = sorted(uses.items(), key=lambda kv: (-kv[1], kv[0]))
        return [ProcedureMatch(cause=c, steps=list(steps), times_used=n) for (c, steps), n in ranked[:limit]]
