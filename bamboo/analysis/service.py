"""The analysis steps as plain async functions over the worker's services (activities wrap them).

Everything here reads the knowledge store; the single write in this package is operator feedback
(bamboo.analysis.feedback), which has its own table.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from bamboo.analysis import queries
from bamboo.analysis.clues import extract_clues
from bamboo.analysis.diagnosis import llm_diagnosis
from bamboo.analysis.feedback import operator_verdict
from bamboo.analysis.ranked import ranking_diagnosis
from bamboo.analysis.email import draft_email
from bamboo.analysis.contract import Diagnosis, DiagnoseInput, EmailDraft, EmailInput, Evidence, ProcedurePlan
from bamboo.analysis.procedures import builtin_catalog, plan_procedures
from bamboo.analysis.ranking import novel_leads, operator_first, rank_candidates, with_verdicts
from bamboo.analysis.retrieval import similar_incidents
from bamboo.analysis.wording import STORED_DIALOGS_PER_CAUSE, contenders, order_by_wording
from bamboo.llm.errors import LLMOutputError
from bamboo.offload import in_thread
from bamboo.services import Services

MAX_CANDIDATES = 10
# Ranking is milliseconds; only a machine that stopped running threads exceeds this.
RANKING_BUDGET_S = 60.0


class AnalysisService:
    def __init__(self, services: Services) -> None:
        self.s = services

    @property
    def _pool(self):
        return self.s.store.pool

    async def gather_evidence(self, task: dict[str, Any]) -> Evidence:
        clues = extract_clues(task, self.s.settings.pseudonym_key.get_secret_value().encode())
        notes = [f"skipped field {s}" for s in clues.skipped]
        edges = await queries.clue_edges(self._pool, clues.clues) + await queries.context_edges(self._pool, clues.clues)
        edges = with_verdicts(clues.clues, edges, await queries.verdict_evidence(self._pool, clues.clues))
        causes = sorted({e.cause for e in edges})
        stats = await queries.cause_stats(self._pool, causes)
        fixes = await queries.resolutions(self._pool, causes)
        commonness = await queries.clue_commonness(self._pool, clues.clues)
        # Off the loop: the edges scale with the task's clues and the causes they reach.
        candidates = await in_thread(partial(rank_candidates, limit=MAX_CANDIDATES, resolution_incidents=fixes.incidents,
                                             commonness=commonness), clues.clues, edges, stats, fixes.texts,
                                     budget_s=RANKING_BUDGET_S, what="ranking the candidate causes")
        symptoms = [c.name for c in clues.of_type("symptom")]
        dialogs = [c.text for c in clues.of_type("symptom") if c.text.strip()]
        if dialogs:
            stored = await queries.stored_dialogs(self._pool, symptoms, contenders(candidates), STORED_DIALOGS_PER_CAUSE)
            candidates = await in_thread(order_by_wording, candidates, dialogs, stored,
                                         budget_s=RANKING_BUDGET_S, what="matching the error dialog's wording")
        novel = novel_leads(clues.clues, await queries.known_symptoms(self._pool, symptoms))
        if not clues.of_type("symptom"):
            notes.append("the task has no errorDialog: ranking rests on status and task features only")
        similar = await similar_incidents(clues, self.s.store.knowledge, self._pool, self.s.embedder)
        verdict, kind = await operator_verdict(self._pool, clues.task_id) or (None, None)
        candidates, verdict_note = operator_first(candidates, verdict, kind or "confirmed")
        if verdict_note:
            notes.append(verdict_note)
        decided = bool(verdict) and not verdict_note.startswith("no candidate")
        return Evidence(clues=clues, candidates=candidates, novel=novel, similar=similar, notes=notes,
                        operator_cause=verdict if decided else None, operator_verdict=kind if decided else None)

    async def diagnose(self, inp: DiagnoseInput) -> Diagnosis:
        """The LLM's diagnosis; if the model cannot produce a valid answer, the ranking's, saying so."""
        try:
            return await llm_diagnosis(self.s.llm, inp.evidence, inp.extra_context)
        except LLMOutputError as exc:
            return ranking_diagnosis(inp.evidence, note=f"LLM answer invalid twice ({str(exc)[:200]}); "
                                                         "used the graph ranking")

    async def procedure_plan(self, cause: str) -> ProcedurePlan:
        rows = await queries.procedures_for_cause(self._pool, cause)
        code = {r.name: r.code for r in rows if r.code}
        return plan_procedures(cause, rows, builtin_catalog(code))

    async def email(self, inp: EmailInput) -> EmailDraft:
        return await draft_email(self.s.llm, inp)
