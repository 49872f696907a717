"""Finalize: turn a session into knowledge — Cause, Resolution and Procedures with provenance.

- Cause and Resolution are canonicalised against existing nodes (a cause typed as a synonym of a stored
  one lands on the stored node), unlike upstream, which stored the operator's words verbatim.
- Procedures are named by their signature only (``proc__<tools>``), so the same step from any session
  merges on one node and one ``procedures`` row; they are never renamed by similarity. Each capture adds its
  provenance (the session as the incident, the operator's request and the model's signals as triggers, the
  cause, the task's clues, who approved it; for code written from a resolved incident's written procedure, that
  procedure's name, text and incidents) to that row: equivalent code keeps the stored body and grows its
  frequency, different code becomes a new version (``ProcedureRepository.capture``). A run that reused a
  stored procedure is captured as that procedure's body, so reuse grows it too.
- ``Cause -investigated_by-> Procedure`` edges carry their provenance (trigger signals, result summary,
  execution time, session) in the edge's params, which the store keeps per graph.
- An abandoned (or expired) session has no cause; its procedures are still stored, as ``tentative``
  nodes and rows, instead of being dropped for being isolated.
"""

from __future__ import annotations

from bamboo.embeddings.base import Embedder
from bamboo.investigation.procedures import ProcedureRepository, ProcedureStatus
from bamboo.investigation.provenance import Capture
from bamboo.models.graph import GraphEdge, GraphNode, GraphWrite, KnowledgeGraph, NodeRef
from bamboo.investigation.contract import CapturedRun, FinalizeInput, FinalizeResult
from bamboo.store.canonical import canonical_targets, canonicalise_graph
from bamboo.store.knowledge import KnowledgeStore
from policy.procedures import is_procedure_name, procedure_name


def session_graph_id(session_id: str) -> str:
    return f"investigate:{session_id}"


def procedure_runs(captured: list[CapturedRun]) -> dict[str, CapturedRun]:
    """The last successful run per signature name.

    Code calling no tool is not a procedure, and code that only replays procedures adds no new step.
    """
    chosen: dict[str, CapturedRun] = {}
    for run in captured:
        if run.ok and any(not is_procedure_name(tool) for tool in run.tools):
            chosen[procedure_name(run.tools)] = run
    return chosen


class Finalizer:
    def __init__(self, knowledge: KnowledgeStore, procedures: ProcedureRepository, embedder: Embedder,
                 threshold: float) -> None:
        self.knowledge = knowledge
        self.procedures = procedures
        self.embedder = embedder
        self.threshold = threshold

    async def finalize(self, inp: FinalizeInput) -> FinalizeResult:
        cause, resolution = (inp.cause, inp.resolution) if inp.outcome == "resolved" else (None, None)
        resolved = bool(cause and resolution)
        status: ProcedureStatus = "approved" if resolved else "tentative"
        runs = procedure_runs(inp.captured)

        graph = KnowledgeGraph()
        renamed: dict[str, str] = {}
        cause_ref: NodeRef | None = None
        if cause and resolution:  # i.e. resolved
            core = KnowledgeGraph()
            cause_ref = core.add_node(GraphNode(kind="Cause", name=cause.strip()[:300], description=cause))
            res_ref = core.add_node(GraphNode(kind="Resolution", name=resolution.strip()[:300],
                                              description=resolution))
            core.add_edge(GraphEdge(src=cause_ref, kind="solved_by", dst=res_ref, params={"session": inp.session_id}))
            vectors = await self.embedder.embed([n.name for n in canonical_targets(core)])
            canon = await canonicalise_graph(core, self.knowledge, vectors, self.threshold)
            renamed = {old[1]: new.name for old, new in canon.renames.items()}
            graph = canon.graph
            cause_ref = NodeRef(kind="Cause", name=renamed.get(cause_ref.name, cause_ref.name))
            embeddings = canon.canonical_embeddings
            if inp.symptom:
                symptom = graph.add_node(GraphNode(kind="Symptom", name=inp.symptom.strip()[:300]))
                graph.add_edge(GraphEdge(src=symptom, kind="indicate", dst=cause_ref,
                                         params={"session": inp.session_id}))
        else:
            embeddings = {}

        stored: dict[str, str] = {}
        for name, run in sorted(runs.items()):
            written = run.codified
            captured = await self.procedures.capture(name, run.code, status, Capture(
                incident=session_graph_id(inp.session_id), source="session", summary=run.summary,
                triggers=tuple(t for t in (run.request, *run.trigger_signals,
                                           written.description if written else "") if t),
                causes=tuple(c for c in (cause_ref.name if cause_ref else "", written.cause if written else "") if c),
                clues=tuple(inp.clues), reviewed_by=(run.approved_by,), ran_at=run.executed_at, run_status="ok",
                codified_from=(written.name,) if written else (),
                written_incidents=tuple(written.incidents) if written else (),
            ))
            stored[name] = captured.status

        for name, run in sorted(runs.items()):
            ref = graph.add_node(GraphNode(
                kind="Procedure", name=name, description=run.summary[:2000],
                props={"status": stored[name], "code_hash": run.code_hash, "tools": run.tools},
            ))
            if cause_ref is not None:
                graph.add_edge(GraphEdge(src=cause_ref, kind="investigated_by", dst=ref, params={
                    "trigger_signals": run.trigger_signals, "result_summary": run.result_summary,
                    "executed_at": run.executed_at.isoformat(), "session": inp.session_id, "turn": run.turn,
                }))

        if graph.nodes:
            await self.knowledge.write_graph(
                GraphWrite(graph_id=session_graph_id(inp.session_id), incident_id=inp.session_id,
                           task_id=inp.task_id, graph=graph, summary="; ".join(inp.findings)[:2000],
                           warnings=[] if resolved else [f"session {inp.outcome}: procedures kept as tentative"]),
                [], embeddings,
            )
        return FinalizeResult(
            cause=cause_ref.name if cause_ref else None,
            resolution=next((n.name for n in graph.nodes if n.kind == "Resolution"), None),
            procedures=sorted(n for n, s in stored.items() if s == "approved"),
            tentative=sorted(n for n, s in stored.items() if s == "tentative"),
            renamed=renamed,
        )
