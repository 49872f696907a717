"""The reuse step's reading: the approved procedures nearest the operator's request, how near each is, and the task.

What it reads is I/O, so it runs in an activity; which procedure fits is decided by the workflow from what
this returns (``policy.reuse.choose_procedure``). Nearness is the cosine similarity, in the deployment's
embedder, between the request and the procedure's triggers (the requests and signals it was captured for) and
its summary, the best of them. The request is also compared with each offered tool's description, so the
workflow can tell a procedure whose tools are not what the request is about (``policy.reuse.better_tool``).
Vectors of texts already seen are kept in memory, so a turn embeds little more than its request.

The task's facts (its clue names, by the same routing analysis and accumulation use, and the parameters a
body may be bound to: the task id, its site, and its first input dataset when a procedure reads one) are read
once per session through the worker's own read-only PanDA tools; a task that cannot be read leaves them empty
and says why, and reuse goes on without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from bamboo.analysis.clues import extract_clues
from bamboo.embeddings.base import Embedder
from bamboo.investigation.contract import ReuseCandidates, ReuseQuery
from bamboo.investigation.procedures import ProcedureRepository, StoredProcedure
from bamboo.offload import in_thread
from bamboo.tools.model import ToolCaller
from bamboo.tools.selection import tool_text
from policy.code_identity import code_hash
from policy.procedures import is_procedure_name
from policy.reuse import ProcedureCandidate, ReuseSettings, TaskFacts, needed_parameters, valid_parameter

log = logging.getLogger(__name__)

MAX_TEXTS_PER_PROCEDURE = 20
MAX_REUSE_CANDIDATES = 20
COMPARE_BUDGET_S = 10.0
CACHE_SIZE = 8192
TASK_TOOL = "get_task_details"
DATASET_TOOL = "get_task_input_datasets"


def nearest(stored: Sequence[StoredProcedure], similarity: dict[str, float],
            settings: ReuseSettings) -> list[StoredProcedure]:
    """The procedures the reuse step may propose: near enough to the request for the lower of the two thresholds
    (no other is ever chosen), nearest first, at most ``MAX_REUSE_CANDIDATES``. Each carries its body and the one
    before it, so handing on the whole store outgrew Temporal's payload limit at a few hundred procedures; the
    cost is that among more than that many procedures all near the request, the farther ones are not weighed."""
    least = min(settings.threshold, settings.state_changing_threshold)
    near = [p for p in stored if similarity[p.name] >= least]
    near.sort(key=lambda p: (-similarity[p.name], p.name))
    return near[:MAX_REUSE_CANDIDATES]


class ProcedureMatcher:
    """Reads what the reuse step chooses from (module docstring); built by the worker."""

    def __init__(self, repository: ProcedureRepository, embedder: Embedder, tools: ToolCaller, pseudonym_key: bytes,
                 settings: ReuseSettings) -> None:
        self.repository = repository
        self.embedder = embedder
        self.tools = tools
        self.pseudonym_key = pseudonym_key
        self.settings = settings
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()

    async def candidates(self, query: ReuseQuery) -> ReuseCandidates:
        stored = await self.repository.approved()
        texts = {p.name: _match_texts(p) for p in stored}
        offered = {spec.name: tool_text(spec) for spec in self.tools.list_tools() if not is_procedure_name(spec.name)}
        vectors = await self._embed([query.request, *(t for group in texts.values() for t in group),
                                     *offered.values()])
        count = sum(map(len, texts.values())) + len(offered)
        tool_fit, nearness = await in_thread(_nearness, vectors, query.request, texts, offered, budget_s=COMPARE_BUDGET_S,
                                             what=f"comparing the request with {count} texts")
        near = nearest(stored, {name: similarity for name, (similarity, _) in nearness.items()}, self.settings)
        previous = await self.repository.versions(
            sorted({h for p in near if (h := p.provenance.previous_code_hash)}))
        # Each body's own hash, not the row's column: the audit, the transcript and record_run name the body by it.
        hashes = await asyncio.to_thread(lambda: {p.name: code_hash(p.code) for p in near})
        candidates = []
        for procedure in near:
            similarity, matched = nearness[procedure.name]
            record = procedure.provenance
            candidates.append(ProcedureCandidate(
                name=procedure.name, code=procedure.code, code_hash=hashes[procedure.name],
                similarity=max(-1.0, min(1.0, round(similarity, 6))), matched=matched, summary=record.summary,
                causes=record.causes, clues=record.clues, incidents=record.incidents, frequency=record.frequency,
                reviewed_by=record.reviewed_by, source=",".join(record.sources), last_run_at=record.last_run_at,
                last_run_status=record.last_run_status, versions=record.versions,
                previous_code=previous.get(record.previous_code_hash or ""),
            ))
        task = None
        if query.task_id is not None and not query.task_known:
            needs = {p for c in near for p in needed_parameters(c.code)}
            task = await self.task_facts(query.task_id, "dataset" in needs)
        return ReuseCandidates(candidates=candidates, task=task, settings=self.settings, tool_fit=tool_fit,
                               farther=len(stored) - len(near))

    async def task_facts(self, task_id: int, with_dataset: bool) -> TaskFacts:
        """The task's clue names and bindable parameters (the task id always)."""
        parameters: dict[str, Any] = {"task_id": task_id}
        read = await self._read_only_call(TASK_TOOL, {"task_id": task_id})
        if not isinstance(read, dict):
            return TaskFacts(parameters=parameters, note=f"the task could not be read ({read})")
        clues = tuple(sorted({c.name for c in extract_clues(read, self.pseudonym_key).clues}))
        if valid_parameter("site", read.get("site")):
            parameters["site"] = read["site"]
        if with_dataset:
            datasets = await self._read_only_call(DATASET_TOOL, {"task_id": task_id})
            first = datasets[0].get("name") if isinstance(datasets, list) and datasets else None
            if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict) \
                    and valid_parameter("dataset", first):
                parameters["dataset"] = first
        return TaskFacts(clues=clues, parameters=parameters, status=_text(read.get("status"), 64),
                         owner=_text(read.get("userName"), 200))

    async def _read_only_call(self, name: str, arguments: dict[str, Any]) -> Any:
        """A read-only tool's data, or a short reason it gave none (never a state-changing tool)."""
        spec = next((s for s in self.tools.list_tools() if s.name == name), None)
        if spec is None or not spec.read_only:
            return f"{name} is not a read-only tool here"
        try:
            result = await self.tools.call_tool(name, arguments)
        except Exception as exc:  # noqa: BLE001 — reuse works without the task's facts; say why they are missing
            log.warning("reuse could not call %s: %s", name, exc)
            return f"{name} failed: {type(exc).__name__}"
        return result.data if result.ok else f"{name} failed: {(result.error or '')[:200]}"

    async def _embed(self, texts: Sequence[str]) -> dict[str, list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            for text, vector in zip(missing, await self.embedder.embed(missing), strict=True):
                self._vectors[text] = vector
        found = {t: self._vectors[t] for t in texts}
        for text in found:
            self._vectors.move_to_end(text)
        while len(self._vectors) > CACHE_SIZE:
            self._vectors.popitem(last=False)
        return found


def _nearness(vectors: dict[str, list[float]], request: str, texts: dict[str, list[str]], offered: dict[str, str],
              ) -> tuple[dict[str, float], dict[str, tuple[float, str]]]:
    """The request's similarity to each offered tool's text, and to each procedure's nearest text (with which):
    sized by the store (0.7 s for 600 procedures of 20 texts, on the loop before), so it runs in a thread."""
    wanted = vectors[request]
    tool_fit = {name: round(_cosine(wanted, vectors[text]), 6) for name, text in offered.items()}
    nearness = {name: max(((_cosine(wanted, vectors[t]), t) for t in group), default=(0.0, ""))
                for name, group in texts.items()}
    return tool_fit, nearness


def _match_texts(procedure: StoredProcedure) -> list[str]:
    """What a request is compared with: the procedure's triggers, then its summary."""
    record = procedure.provenance
    texts = [t for t in (*record.triggers, record.summary) if t.strip()]
    return list(dict.fromkeys(texts))[:MAX_TEXTS_PER_PROCEDURE]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two vectors (the embedder's are unit length; normalised here anyway)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
    return dot / norm if norm else 0.0


def _text(value: Any, limit: int) -> str:
    """A task field shown to reviewers: a string, bounded; anything else is not shown."""
    return value[:limit] if isinstance(value, str) else ""
