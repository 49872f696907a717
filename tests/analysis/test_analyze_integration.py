"""AnalyzeTask, BatchAnalyze, feedback and the CLI on the real stack (Temporal dev server, Postgres,
the production worker in-process, the scripted LLM over HTTP)."""

from __future__ import annotations

import asyncio
import json
import uuid

from typer.testing import CliRunner

from bamboo.analysis.feedback import record_feedback
from bamboo.analysis.contract import (
    AnalysisResult, AnalyzeInput, BatchAnalyzeInput, BatchAnalyzeProgress, BatchAnalyzeResult, Feedback,
    analyze_workflow_id, result_file_name,
)
from bamboo.analysis.service import AnalysisService
from bamboo.extraction.labels import normalise_label
from tests.analysis.answers import analysis_handler, explore_with, pick_top
from tests.support.scripted_llm import Reply
from workflows.analyze import AnalyzeTask
from workflows.batch_analyze import BatchAnalyze
from bamboo.contract import Queue

# Tables analysis may write: its feedback table, claim-check blobs (batch listings) and the audit log.
ANALYSIS_MAY_WRITE = {"analysis_feedback", "blobs", "audit"}


async def all_row_counts(pool) -> dict[str, int]:
    async with pool.connection() as conn:
        tables = [r[0] for r in await (await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")).fetchall()]
        return {t: (await (await conn.execute(f'SELECT count(*) FROM "{t}"')).fetchone())[0] for t in tables}


async def forget_feedback(pool, task_id: int) -> None:
    """Tests share one knowledge base; a verdict given by one test must not steer another's ranking."""
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM analysis_feedback WHERE task_id = %s", (task_id,))


async def run_analysis(client, task: dict, threshold: float = 0.5, sandbox_wait_s: float = 2) -> AnalysisResult:
    return await client.execute_workflow(
        AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=threshold, sandbox_wait_s=sandbox_wait_s),
        id=f"{analyze_workflow_id(task.get('jediTaskID'), task.get('status'))}:{uuid.uuid4().hex[:6]}",
        task_queue=Queue.MAIN,
    )


async def test_analysis_diagnoses_held_out_tasks_and_never_writes_the_knowledge_store(learned, analysis_client, analysis_services):
    before = await all_row_counts(analysis_services.store.pool)
    results = [await run_analysis(analysis_client, dict(i.task_data)) for i in learned]
    after = await all_row_counts(analysis_services.store.pool)
    unchanged = {t: n for t, n in before.items() if t not in ANALYSIS_MAY_WRITE}
    assert {t: after[t] for t in unchanged} == unchanged
    assert before["nodes"] > 0 and before["edge_provenance"] > 0

    truths = [normalise_label(i.resolution_record.cause) for i in learned]
    top3 = sum(t in [c.name for c in r.candidates[:3]] for r, t in zip(results, truths))
    assert top3 >= 5, [(t, [c.name for c in r.candidates[:3]]) for r, t in zip(results, truths)]
    first = results[0]
    assert first.task_id == learned[0].task_data["jediTaskID"] and first.diagnosis_source == "llm"
    assert first.root_cause == first.candidates[0].name  # the scripted LLM picks the top candidate
    assert first.email_subject.startswith(f"PanDA task {first.task_id}") and first.root_cause in first.email_content
    steps = {s.step: s for s in first.steps}
    assert result_explored_only_when_contested(first)
    assert steps["procedure_replay"].status == "not_needed" and "manual step" in steps["procedure_replay"].detail
    assert [p.disposition for p in first.procedure_plan] and all(p.disposition == "manual_step" for p in first.procedure_plan)
    assert first.similar_incidents, "vector retrieval found no similar incident"
    assert all(s.summary for s in first.similar_incidents)


def result_explored_only_when_contested(result: AnalysisResult) -> bool:
    """The exploration ran exactly when the ranking's margin was below the default threshold (0.5)."""
    status = {s.step: s.status for s in result.steps}["exploratory_investigation"]
    return (status == "not_needed") == (result.confidence >= 0.5)


async def test_unknown_symptom_keeps_the_other_evidence(learned, analysis_services):
    task = dict(learned[0].task_data)
    task["errorDialog"] = "zzkx: the flux capacitor rejected the payload"
    evidence = await AnalysisService(analysis_services).gather_evidence(task)
    assert [n.symptom for n in evidence.novel] and evidence.novel[0].reason == "symptom never seen before"
    assert evidence.candidates, "one unknown symptom must not discard the status and feature evidence"
    assert {m.type for m in evidence.candidates[0].matched} >= {"status", "task_feature"}


# The exploration runs below the diagnosis confidence (the ranking's margin, whatever the model says);
# a threshold of 1.0 makes every contested ranking explore.
EXPLORE_ALWAYS = 1.0


async def test_low_confidence_explores_read_only_or_says_why_not(learned, analysis_client, llm):
    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.2))
    result = await run_analysis(analysis_client, dict(learned[1].task_data), threshold=EXPLORE_ALWAYS)
    steps = {s.step: s for s in result.steps}
    explore = steps["exploratory_investigation"]
    assert f"{result.confidence:.2f} < 1.0" in explore.detail
    assert any(g.suggested_tool_capability == "a site downtime lookup" for g in result.capability_gaps)
    if explore.status == "unavailable":  # no worker polls the sandbox queue in this test process
        assert "sandbox queue" in explore.detail and "re_diagnosis" not in steps
    else:
        assert explore.status == "ran" and "get_task_jobs_summary" in explore.detail, explore
        assert "re_diagnosis" in steps


async def test_exploration_code_reaching_a_state_changing_tool_is_refused(learned, analysis_client, llm):
    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.2), explore=explore_with("kill_task"))
    result = await run_analysis(analysis_client, dict(learned[1].task_data), threshold=EXPLORE_ALWAYS)
    explore = {s.step: s for s in result.steps}["exploratory_investigation"]
    assert explore.status == "failed" and "refused" in explore.detail and "state_changing" in explore.detail


async def test_exploration_without_code_or_gap_is_a_reported_failure(learned, analysis_client, llm):
    base = analysis_handler(diagnose=pick_top(confidence=0.2))
    llm.handler = lambda r: ({"code": "", "capability_gaps": []} if r.schema_name == "analysis_exploration_code"
                             else base(r))
    result = await run_analysis(analysis_client, dict(learned[1].task_data), threshold=EXPLORE_ALWAYS)
    explore = {s.step: s for s in result.steps}["exploratory_investigation"]
    assert explore.status == "failed" and "neither investigation code nor a capability gap" in explore.detail


async def test_known_cause_procedures_replay_read_only_and_suggest_state_changing(learned, analysis_client,
                                                                                analysis_services):
    task = dict(learned[2].task_data)
    cause = (await AnalysisService(analysis_services).gather_evidence(task)).candidates[0].name
    pool = analysis_services.store.pool
    async with pool.connection() as conn:
        names = [r[0] for r in await (await conn.execute(
            "SELECT p.name FROM nodes c JOIN edges e ON e.src = c.id AND e.kind = 'investigated_by' "
            "JOIN nodes p ON p.id = e.dst WHERE c.kind = 'Cause' AND c.name = %s ORDER BY p.name", (cause,))).fetchall()]
        assert len(names) >= 2
        captured = {names[0]: f"return await tools.get_task_jobs_summary(task_id={task['jediTaskID']})",
                    names[1]: f"return await tools.retry_task(task_id={task['jediTaskID']})"}
        for name, code in captured.items():
            await conn.execute("INSERT INTO procedures (signature, code, code_hash) VALUES (%s, %s, 'test')",
                               (name, code))
    try:
        result = await run_analysis(analysis_client, task)
    finally:
        async with pool.connection() as conn:
            await conn.execute("DELETE FROM procedures WHERE signature = ANY(%s)", (list(captured),))
    plan = {p.name: p for p in result.procedure_plan}
    assert plan[names[0]].disposition == "replayable" and plan[names[0]].allowed_tools == ["get_task_jobs_summary"]
    assert plan[names[1]].disposition == "suggestion" and plan[names[1]].state_changing_tools == ["retry_task"]
    assert any(s.startswith(names[1]) and "retry_task" in s for s in result.suggestions)
    replay = [s for s in result.steps if s.step == "procedure_replay"]
    assert replay and replay[0].detail.startswith(names[0])
    assert replay[0].status in ("ran", "unavailable"), replay


async def test_invalid_llm_answers_fall_back_to_the_ranking_and_say_so(learned, analysis_client, llm):
    base = analysis_handler()
    llm.handler = lambda r: Reply.json({"cause": "made up"}) if r.schema_name == "analysis_diagnosis" else base(r)
    result = await run_analysis(analysis_client, dict(learned[2].task_data))
    assert result.diagnosis_source == "ranking" and result.root_cause == result.candidates[0].name
    assert any("used the graph ranking" in n for n in result.notes)


async def test_feedback_raises_the_confirmed_cause_and_is_idempotent(learned, analysis_services, analysis_client):
    analysis = AnalysisService(analysis_services)
    task = dict(learned[3].task_data)
    before = await analysis.gather_evidence(task)
    assert len(before.candidates) >= 2
    runner_up = before.candidates[1]
    for _ in range(2):  # the same verdict twice counts once
        receipt = await record_feedback(analysis_services.store.pool, Feedback(
            task_id=task["jediTaskID"], verdict="wrong", cause=runner_up.name.lower(),
            proposed_cause=before.candidates[0].name))
    assert receipt.matched_known_cause and receipt.cause == runner_up.name and receipt.cause_confirmations == 1
    after = {c.name: c for c in (await analysis.gather_evidence(task)).candidates}
    assert after[runner_up.name].frequency == runner_up.frequency + 1
    assert after[runner_up.name].confirmations == 1
    assert after[before.candidates[0].name].resolution_success_rate == 0.0
    # The correction decides this task's next analysis, whatever the ranking and the model say.
    again = await run_analysis(analysis_client, task)
    assert again.root_cause == runner_up.name and again.cause_source == "operator" and again.confidence == 1.0
    assert any("an operator corrected this task" in n for n in again.notes)
    await forget_feedback(analysis_services.store.pool, task["jediTaskID"])
    assert (await run_analysis(analysis_client, task)).root_cause == before.candidates[0].name


async def test_corrections_on_look_alike_tasks_raise_the_cause_for_a_task_never_corrected(
        learned, analysis_services, analysis_settings):
    """A verdict carries its task's clues and what the analysis proposed: corrections given on two tasks
    that looked like this one raise the corrected cause for a third task no one corrected (before, 0 of 17
    such tasks changed), on the clues the proposed cause could not explain; the clues it explains keep
    their counts."""
    from bamboo.cli.feedback_cmd import task_clue_keys

    analysis = AnalysisService(analysis_services)
    pool = analysis_services.store.pool
    base = dict(learned[3].task_data)
    plain = await analysis.gather_evidence(base)
    proposed, runner_up = plain.candidates[0].name, plain.candidates[1].name
    odd = {**base, "errorDialog": base["errorDialog"] + " pilot:1999"}  # a pilot code the store never saw
    looks_alike = [{**odd, "jediTaskID": base["jediTaskID"] + 1_000_000 + i} for i in range(3)]
    first_look = (await analysis.gather_evidence(looks_alike[2])).candidates
    before = {c.name: c.support for c in first_look}
    proposal_counts = {(m.name, m.edge_frequency) for c in first_look if c.name == proposed for m in c.matched}
    keys = task_clue_keys(analysis_settings, looks_alike[0])
    corrected = [t["jediTaskID"] for t in looks_alike[:2]]
    try:
        for tid in corrected:
            receipt = await record_feedback(pool, Feedback(task_id=tid, verdict="wrong", cause=runner_up,
                                                           proposed_cause=proposed, clues=keys))
            assert receipt.clues == len(keys)
        after = await analysis.gather_evidence(looks_alike[2])
        raised = {c.name: c for c in after.candidates}[runner_up]
        assert after.candidates[0].name == runner_up and raised.support > before[runner_up]
        assert any(m.name == "pilotErrorCode=1999" and m.edge_frequency == 2 for m in raised.matched)
        top = {c.name: c for c in after.candidates}[proposed]
        assert {(m.name, m.edge_frequency) for m in top.matched} == proposal_counts, \
            "the clues the proposal explains keep their counts"
        assert after.operator_cause is None, "no verdict was given on this task itself"
        # A repeated verdict replaces its row: it cannot inflate the evidence.
        await record_feedback(pool, Feedback(task_id=corrected[0], verdict="wrong", cause=runner_up,
                                             proposed_cause=proposed, clues=keys))
        again = {c.name: c.support for c in (await analysis.gather_evidence(looks_alike[2])).candidates}
        assert again[runner_up] == raised.support
    finally:
        for tid in corrected:
            await forget_feedback(pool, tid)
    assert {c.name: c.support for c in (await analysis.gather_evidence(looks_alike[2])).candidates} == before


async def test_batch_analyze_skips_done_tasks_and_reports_progress(learned, analysis_client, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for i in learned[:3]:
        (folder / f"{i.task_data['jediTaskID']}.json").write_text(json.dumps(i.task_data))
    done_id = analyze_workflow_id(learned[0].task_data["jediTaskID"], learned[0].task_data["status"])
    results = tmp_path / "results"  # a result already there: the task is not analysed again
    results.mkdir()
    (results / result_file_name(done_id)).write_text("{}")
    bid = f"t-{uuid.uuid4().hex[:6]}"
    handle = await analysis_client.start_workflow(
        BatchAnalyze.run, BatchAnalyzeInput(batch_id=bid, path=str(folder), results_dir=str(results),
                                            concurrency=2, continue_as_new_every=1, model_deadline_s=123.0),
        id=f"analyze-batch:{bid}", task_queue=Queue.MAIN,
    )
    result: BatchAnalyzeResult = await handle.result()
    assert (result.total, result.done, result.skipped, result.failed) == (3, 2, 1, 0), result.failures
    child = await analysis_client.get_workflow_handle(
        analyze_workflow_id(learned[1].task_data["jediTaskID"], learned[1].task_data["status"]),
        result_type=AnalysisResult).result()
    assert child.task_id == learned[1].task_data["jediTaskID"]
    assert child.model_deadline_s == 123.0  # the starter's model deadline reaches every analysis of the batch


async def test_batch_analyze_pause_resume_and_cancel(learned, analysis_client, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for i in learned[:2]:
        (folder / f"{i.task_data['jediTaskID']}.json").write_text(json.dumps(i.task_data))

    async def progress(handle) -> BatchAnalyzeProgress:
        for _ in range(100):
            try:
                p = await handle.query(BatchAnalyze.progress)
                if p.total is not None:
                    return p
            except Exception:  # noqa: BLE001 — the first workflow task may not have run yet
                pass
            await asyncio.sleep(0.1)
        raise AssertionError("no progress from the batch")

    resumed = await analysis_client.start_workflow(
        BatchAnalyze.run, BatchAnalyzeInput(batch_id="paused", path=str(folder), paused=True),
        id=f"analyze-batch:p-{uuid.uuid4().hex[:6]}", task_queue=Queue.MAIN)
    p = await progress(resumed)
    assert (p.paused, p.done, p.running, p.pending) == (True, 0, 0, 2)
    await resumed.signal(BatchAnalyze.resume)
    assert (await resumed.result()).done == 2

    cancelled = await analysis_client.start_workflow(
        BatchAnalyze.run, BatchAnalyzeInput(batch_id="cancelled", path=str(folder)),
        id=f"analyze-batch:c-{uuid.uuid4().hex[:6]}", task_queue=Queue.MAIN, start_signal="pause")
    p = await progress(cancelled)
    assert p.paused and p.done == 0
    await cancelled.signal(BatchAnalyze.cancel)
    result = await cancelled.result()
    assert result.cancelled and result.done == 0 and result.total == 2


async def test_cli_analyze_batch_and_feedback(learned, analysis_settings, analysis_services, tmp_path, monkeypatch):
    pool = analysis_services.store.pool
    from bamboo.cli.main import app
    from bamboo.settings import get_settings

    for key, value in {"BAMBOO_TEMPORAL_ADDRESS": analysis_settings.temporal_address,
                       "BAMBOO_DATABASE_URL": analysis_settings.database_url,
                       "BAMBOO_EMBEDDING_BASE_URL": analysis_settings.embedding_base_url,
                       "BAMBOO_EMBEDDING_MODEL": analysis_settings.embedding_model}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    runner = CliRunner()
    try:
        task_file = tmp_path / "task.json"
        task_file.write_text(json.dumps(learned[4].task_data))
        out = await asyncio.to_thread(runner.invoke, app, ["analyze", "--task-data", str(task_file), "--out",
                                                           str(tmp_path / "one.json")])
        assert out.exit_code == 0, out.output
        assert "Root cause:" in out.output and "Email draft" in out.output
        saved = AnalysisResult.model_validate_json((tmp_path / "one.json").read_text())
        assert saved.task_id == learned[4].task_data["jediTaskID"]

        folder = tmp_path / "tasks"
        folder.mkdir()
        for i in learned[4:6]:
            (folder / f"{i.task_data['jediTaskID']}.json").write_text(json.dumps(i.task_data))
        args = ["analyze-batch", str(folder), "--out", str(tmp_path / "results")]
        first = await asyncio.to_thread(runner.invoke, app, args)
        assert first.exit_code == 0, first.output
        # Not a terminal: plain progress lines, the last one the batch's final counts.
        assert "2/2 settled, 0 failed" in first.output and "0 running done" in first.output, first.output
        assert len(list((tmp_path / "results").glob("*.json"))) == 2
        again = await asyncio.to_thread(runner.invoke, app, args)
        assert again.exit_code == 0 and "2 already analysed" in again.output, again.output
        corrected = learned[4]
        first_result = AnalysisResult.model_validate_json(next((tmp_path / "results").glob(
            f"*{corrected.task_data['jediTaskID']}*.json")).read_text())
        other = next(c.name for c in first_result.candidates if c.name != first_result.root_cause)
        await record_feedback(pool, Feedback(task_id=corrected.task_data["jediTaskID"], verdict="wrong", cause=other))
        redo = await asyncio.to_thread(runner.invoke, app, args + ["--reanalyse"])
        assert redo.exit_code == 0 and "0 already analysed" in redo.output, redo.output
        redone = AnalysisResult.model_validate_json(next((tmp_path / "results").glob(
            f"*{corrected.task_data['jediTaskID']}*.json")).read_text())
        assert redone.root_cause == other and redone.cause_source == "operator"
        await forget_feedback(pool, corrected.task_data["jediTaskID"])

        fb = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--correct",
                                                          "--cause", saved.root_cause])
        assert fb.exit_code == 0 and "1 confirmed" in fb.output, fb.output
        # the clues come from what the task's analysis read, found in Temporal
        assert "It counts for tasks sharing this task's" in fb.output, fb.output
        scripted = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--correct",
                                                                "--cause", saved.root_cause, "--json"])
        receipt = json.loads(scripted.stdout)
        assert scripted.exit_code == 0 and receipt["verdict"] == "correct" and receipt["task_id"] == saved.task_id
        assert receipt["cause"] == saved.root_cause and receipt["counts_for_similar_tasks"] is True
        async with pool.connection() as conn:
            stored = (await (await conn.execute("SELECT clues FROM analysis_feedback WHERE task_id = %s",
                                                (saved.task_id,))).fetchone())[0]
        from bamboo.cli.feedback_cmd import task_clue_keys
        assert stored == task_clue_keys(analysis_settings, learned[4].task_data)
        # --wrong without --proposed: what the analysis proposed is read from the task's latest analysis
        # in Temporal (here the --reanalyse run above, which answered the operator's cause)
        other_cause = next(c.name for c in saved.candidates if c.name != redone.root_cause)
        fixed = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--wrong",
                                                             "--cause", other_cause])
        assert fixed.exit_code == 0 and "It counts for tasks sharing" in fixed.output, fixed.output
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT cause, proposed_cause FROM analysis_feedback WHERE task_id = %s",
                                            (saved.task_id,))).fetchone()
        assert row == (other_cause, redone.root_cause)
        await forget_feedback(pool, saved.task_id)
        typo = saved.root_cause[:-2] + "xx"  # a cause in other words than the stored label
        unknown = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--wrong",
                                                               "--cause", typo])
        assert unknown.exit_code != 0 and "has no cause" in unknown.output and saved.root_cause in unknown.output
        assert "--new-cause" in unknown.output
        new = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--wrong",
                                                           "--cause", typo, "--new-cause"])
        assert new.exit_code == 0 and "knows yet" in new.output, new.output
        await forget_feedback(pool, saved.task_id)
        hostile = "[link=https://evil.example]Renew[/link] \x1b[2J[bold]quota[/bold]"
        shown = await asyncio.to_thread(runner.invoke, app, ["feedback", str(saved.task_id), "--wrong",
                                                             "--cause", hostile, "--new-cause"])
        assert shown.exit_code == 0, shown.output
        assert "[link=https://evil.example]Renew[/link]" in shown.output and "\x1b" not in shown.output
        assert "⟨U+001B⟩" in shown.output, "the cause is printed inert, never as markup or a terminal control"
        await forget_feedback(pool, saved.task_id)
        never = await asyncio.to_thread(runner.invoke, app, ["feedback", "999999901", "--wrong", "--cause",
                                                             saved.root_cause])
        assert never.exit_code == 0 and "decides only task 999999901's next analysis" in never.output, never.output
        assert "no analysis of task 999999901" in never.output and "--task-data" in never.output
        await forget_feedback(pool, 999999901)
        wrong_file = await asyncio.to_thread(runner.invoke, app, ["feedback", "999999901", "--wrong", "--cause",
                                                                  saved.root_cause, "--task-data", str(task_file)])
        assert wrong_file.exit_code != 0 and f"is task {saved.task_id}, not 999999901" in wrong_file.output
        missing = await asyncio.to_thread(runner.invoke, app, ["feedback", "1", "--cause", "Something"])
        assert missing.exit_code != 0 and "--correct or --wrong" in missing.output
        neither = await asyncio.to_thread(runner.invoke, app, ["analyze"])
        assert neither.exit_code != 0 and "exactly one of" in neither.output
    finally:
        get_settings.cache_clear()


async def test_exploration_runs_in_the_sandbox_against_panda_and_rediagnoses(learned, analysis_client, llm,
                                                                           analysis_services):
    """The worker's sandbox queue (the sandbox's execute_code, the built-in PanDA tools, the PanDA
    simulator over HTTP) runs the generated read-only code, and the findings reach a re-diagnosis —
    still without writing the knowledge store."""
    incident = learned[5]
    llm.handler = analysis_handler(diagnose=pick_top(confidence=0.2))
    before = await all_row_counts(analysis_services.store.pool)
    result = await run_analysis(analysis_client, dict(incident.task_data), threshold=EXPLORE_ALWAYS,
                                sandbox_wait_s=60)
    after = await all_row_counts(analysis_services.store.pool)
    assert {t: n for t, n in after.items() if t not in ANALYSIS_MAY_WRITE} == \
        {t: n for t, n in before.items() if t not in ANALYSIS_MAY_WRITE}
    steps = {s.step: s for s in result.steps}
    explore = steps["exploratory_investigation"]
    assert explore.status == "ran", explore
    assert "1 tool call(s)" in explore.detail and "kill_task" not in explore.detail
    assert steps["re_diagnosis"].status == "ran"
    rediagnosis = [c for c in llm.calls if c.schema_name == "analysis_diagnosis" and "investigation" in c.first_user]
    assert rediagnosis
    findings = json.loads(rediagnosis[-1].first_user)["investigation"]["exploration"]
    assert [c["tool"] for c in findings["tool_calls"]] == ["get_task_jobs_summary"], findings
    assert findings["status"] == "ok" and findings["return_value"]["total_jobs"] > 0, findings


async def test_cli_analyze_task_id_fetches_from_panda_or_says_how_to(learned, analysis_settings, monkeypatch):
    from bamboo.cli.main import app
    from bamboo.devstack.ports import free_port
    from bamboo.settings import get_settings

    for key, value in {"BAMBOO_TEMPORAL_ADDRESS": analysis_settings.temporal_address,
                       "BAMBOO_DATABASE_URL": analysis_settings.database_url,
                       "BAMBOO_PANDA_API_URL": analysis_settings.panda_api_url,
                       "BAMBOO_PANDA_MONITOR_URL": analysis_settings.panda_monitor_url}.items():
        monkeypatch.setenv(key, value)
    incident = learned[3]
    runner = CliRunner()
    get_settings.cache_clear()
    try:
        ok = await asyncio.to_thread(runner.invoke, app, ["analyze", "--task-id",
                                                          str(incident.task_data["jediTaskID"]), "--json"])
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.output)["task_id"] == incident.task_data["jediTaskID"]

        monkeypatch.setenv("BAMBOO_PANDA_API_URL", f"http://127.0.0.1:{free_port()}/api/v1")
        get_settings.cache_clear()
        down = await asyncio.to_thread(runner.invoke, app, ["analyze", "--task-id", "123"])
        assert down.exit_code == 1 and "cannot reach PanDA" in down.output and "--task-data" in down.output
    finally:
        get_settings.cache_clear()
