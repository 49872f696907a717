"""The model must not make the diagnosis worse than the ranking, and what is shown comes from the store.

On the real stack (Temporal, Postgres, the production worker, the sandbox, the PanDA simulator), with the
scripted OpenAI-compatible server answering as a model would. The scripted answers also carry the fields
an older schema asked for (a model-written resolution, a free list of evidence), so each test shows the
product ignoring what it no longer trusts rather than merely failing to parse it.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest

from bamboo.analysis.contract import AnalysisResult, AnalyzeInput, Evidence, analyze_workflow_id
from bamboo.analysis.service import AnalysisService
from tests.analysis.answers import analysis_handler, pick_runner_up, pick_top
from workflows.analyze import AnalyzeTask
from bamboo.contract import Queue

OLD_FIELDS = {"resolution": "", "supporting_evidence": []}
INVENTED = "Fixing queue configuration."


async def run_analysis(client, task: dict, threshold: float = 0.5, sandbox_wait_s: float = 60) -> AnalysisResult:
    return await client.execute_workflow(
        AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=threshold, sandbox_wait_s=sandbox_wait_s),
        id=f"{analyze_workflow_id(task.get('jediTaskID'), task.get('status'))}:{uuid.uuid4().hex[:6]}",
        task_queue=Queue.MAIN,
    )


def margin(evidence: Evidence) -> float:
    """The ranking's margin, as the result must report it (bamboo.analysis.ranked.ranking_confidence)."""
    from bamboo.analysis.ranked import ranking_confidence

    return ranking_confidence(evidence.candidates)


def favouring(evidence: Evidence) -> list[str]:
    top, second = evidence.candidates[0], evidence.candidates[1]
    top_share = {m.name: m.share for m in top.matched}
    return [m.name for m in second.matched[:8] if m.share > top_share.get(m.name, 0.0)]


@pytest.fixture(scope="module")
async def contested(learned, analysis_services):
    """A held-out task whose runner-up has clues that favour it over the top candidate (so an override
    can be argued from evidence), with its evidence as the ranking sees it."""
    analysis = AnalysisService(analysis_services)
    for incident in learned:
        task = dict(incident.task_data)
        evidence = await analysis.gather_evidence(task)
        if len(evidence.candidates) >= 2 and favouring(evidence) and evidence.candidates[1].resolutions:
            return task, evidence
    pytest.fail("no held-out task has a runner-up with evidence of its own")


async def test_a_different_cause_at_low_confidence_does_not_replace_the_top_candidate(contested, analysis_client, llm):
    task, evidence = contested
    llm.handler = analysis_handler(diagnose=pick_runner_up(confidence=0.3, **OLD_FIELDS))
    result = await run_analysis(analysis_client, task)
    assert result.root_cause == evidence.candidates[0].name, "a 0.30 answer replaced the ranking's top candidate"
    assert result.cause_source == "ranking" and result.override_reason == ""
    assert result.model_proposal.cause == evidence.candidates[1].name
    assert result.model_proposal.verdict == "override_refused" and "0.30" in result.model_proposal.verdict_reason
    diagnosed = {s.step: s for s in result.steps}["llm_diagnosis"]
    assert "kept the ranking's top candidate because its confidence 0.30" in diagnosed.detail, diagnosed


async def test_a_bare_or_weak_reason_does_not_replace_the_top_candidate_even_at_full_confidence(
        contested, analysis_client, llm):
    task, evidence = contested
    second = evidence.candidates[1].name
    for answer, refusal in [
        (pick_runner_up(confidence=1.0, reason="", **OLD_FIELDS), "stated no reason"),
        (pick_runner_up(confidence=1.0, reason="I am quite sure this is the real cause here", cite_favouring=False,
                        **OLD_FIELDS), "none of the clues it cites"),
        # clues that point at the runner-up more than at the top, named in the reason, but not defining for it
        (pick_runner_up(confidence=1.0, **OLD_FIELDS), f"is defining evidence for {second}"),
    ]:
        llm.handler = analysis_handler(diagnose=answer)
        result = await run_analysis(analysis_client, task)
        assert result.root_cause == evidence.candidates[0].name, refusal
        assert result.model_proposal.verdict == "override_refused"
        assert refusal in result.model_proposal.verdict_reason, result.model_proposal


async def test_an_error_no_stored_cause_is_linked_to_is_no_known_cause_and_the_models_novel_agrees(
        contested, analysis_client, analysis_services, llm):
    """Here the evidence is an error the knowledge base has never seen: the candidates rest on the status and
    features alone, so the ranking itself answers "no known cause" (issue 30) and the model's "novel" agrees;
    an override to another stored cause (and its stored resolution) is tested in test_override.py."""
    task = {**contested[0], "errorDialog": "zzkx: the flux capacitor rejected the payload"}
    evidence = await AnalysisService(analysis_services).gather_evidence(task)
    unexplained = evidence.novel[0].symptom
    assert evidence.candidates, "the status and features still rank stored causes"

    def novel(request):
        return {"cause": "novel", "confidence": 0.9, "cited_clues": [unexplained],
                "reason": f"the error {unexplained} matches no stored cause", "explanation": "a new failure",
                "resolution": INVENTED, "supporting_evidence": []}

    llm.handler = analysis_handler(diagnose=novel)
    result = await run_analysis(analysis_client, task)
    assert result.is_novel and result.root_cause.startswith(f"Novel: no known cause ({unexplained}")
    assert result.cause_source == "ranking" and result.model_proposal.verdict == "agreed"
    assert result.resolution == "" and result.resolution_source == "none", "a novel cause has no stored resolution"
    assert result.confidence == 0.0 and result.ranking_confidence == margin(evidence)
    assert evidence.candidates[0].name in result.explanation, "the closest known causes are named as suggestions"


async def test_the_resolution_shown_is_the_stored_one_with_its_incidents_not_the_models_text(
        contested, analysis_client, analysis_services, llm):
    task, evidence = contested
    top = evidence.candidates[0]
    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.9, resolution=INVENTED, supporting_evidence=[]))
    result = await run_analysis(analysis_client, task)
    assert result.root_cause == top.name
    assert result.resolution == top.resolutions[0] != INVENTED, "the model's free text replaced the stored resolution"
    assert result.resolution_source == "store" and result.resolution_incidents
    async with analysis_services.store.pool.connection() as conn:
        stored = {r[0] for r in await (await conn.execute(
            "SELECT p.graph_id FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'solved_by' "
            "JOIN nodes r ON r.id = e.dst JOIN edge_provenance p ON p.edge_id = e.id "
            "WHERE c.kind = 'Cause' AND c.name = %s AND r.name = %s", (top.name, top.resolutions[0]))).fetchall()}
    assert set(result.resolution_incidents) == stored
    drafted = [c for c in llm.calls if c.schema_name is None and str(task["jediTaskID"]) in c.user]
    assert INVENTED not in drafted[-1].user, "the email was asked to repeat the model's resolution"


async def test_confidence_is_the_rankings_margin_when_the_model_declines(contested, analysis_client, llm):
    task, evidence = contested
    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.0, **OLD_FIELDS))
    result = await run_analysis(analysis_client, task)
    expected = margin(evidence)
    assert 0.0 < expected < 1.0
    assert result.confidence == expected, \
        f"confidence {result.confidence:.2f} shown although the ranking's margin is {expected}"
    assert result.cause_source == "ranking" and "ranking confidence" in result.confidence_basis
    assert result.model_proposal.verdict == "agreed"


async def test_exploration_code_that_calls_no_tool_is_not_run(contested, analysis_client, llm):
    """The offline model's typical "investigation" is a bare literal: running it costs a sandbox run and a
    re-diagnosis and can learn nothing."""
    task, _ = contested
    base = analysis_handler(diagnose=pick_top(confidence=0.4, **OLD_FIELDS))
    llm.handler = lambda r: ({"code": "return {'status': 'ok', 'finding': 'nothing'}", "capability_gaps": []}
                             if r.schema_name == "analysis_exploration_code" else base(r))
    before = len([c for c in llm.calls if c.schema_name == "analysis_diagnosis"])
    result = await run_analysis(analysis_client, task, threshold=1.0)  # below 1.0 always explores
    steps = {s.step: s for s in result.steps}
    explore = steps["exploratory_investigation"]
    assert explore.status == "failed" and "calls no tool" in explore.detail, explore
    assert "re_diagnosis" not in steps
    assert len([c for c in llm.calls if c.schema_name == "analysis_diagnosis"]) == before + 1


async def test_analyze_replays_a_procedure_captured_by_investigate(contested, analysis_client, analysis_services,
                                                                   analysis_settings, llm):
    """Investigate stores code that works on `task_id` (its runs get the task preamble); analysis must run
    it the same way, or every replay ends in a NameError."""
    from bamboo.investigation.finalize import Finalizer
    from bamboo.investigation.procedures import ProcedureRepository
    from bamboo.investigation.contract import CapturedRun, FinalizeInput
    from policy.code_identity import code_hash

    task, evidence = contested
    top = evidence.candidates[0]
    code = "summary = await tools.get_task_jobs_summary(task_id=task_id)\nreturn summary"
    finalizer = Finalizer(analysis_services.store.knowledge, ProcedureRepository(analysis_services.store.pool),
                          analysis_services.embedder, analysis_settings.canonical_match_threshold)
    stored = await finalizer.finalize(FinalizeInput(
        session_id=f"replay-{uuid.uuid4().hex[:6]}", task_id=task["jediTaskID"], outcome="resolved",
        cause=top.name, resolution=top.resolutions[0], actor="shifter",
        captured=[CapturedRun(turn=1, code=code, code_hash=code_hash(code), tools=["get_task_jobs_summary"],
                              summary="job summary of the task", executed_at=datetime.now(timezone.utc),
                              approved_by="shifter", ok=True)],
    ))
    assert stored.cause == top.name and stored.procedures == ["proc__get_task_jobs_summary"]

    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.9, **OLD_FIELDS))
    result = await run_analysis(analysis_client, task)
    plan = {p.name: p for p in result.procedure_plan}
    assert plan["proc__get_task_jobs_summary"].disposition == "replayable"
    replay = [s for s in result.steps if s.step == "procedure_replay"]
    assert replay and replay[0].status == "ran", replay
    rediagnosis = [c for c in llm.calls if c.schema_name == "analysis_diagnosis"
                   and '"procedures"' in c.first_user and str(task["jediTaskID"]) in c.first_user]
    found = json.loads(rediagnosis[-1].first_user)["investigation"]["procedures"]["proc__get_task_jobs_summary"]
    assert found["status"] == "ok", f"the replay failed: {found['error']}"
    assert found["return_value"]["total_jobs"] > 0 and replay[0].detail.endswith("sandbox ok")
