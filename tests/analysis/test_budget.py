"""Spend limits on analysis: the scripted model reports token usage; once an analysis has spent its run
budget no further model step starts (exploration is skipped, the e-mail is the template), and once a batch's
analyses have spent the batch budget no new analysis starts. Spend is in the results and ``BambooSpendUsd``."""

from __future__ import annotations

import json
import uuid

import pytest

from bamboo.analysis.contract import AnalysisResult, AnalyzeInput, BatchAnalyzeInput, BatchAnalyzeResult, analyze_workflow_id
from bamboo.contract import SPEND_USD, Queue
from bamboo.models.spend import ModelPrice
from workflows.analyze import AnalyzeTask
from workflows.batch_analyze import BatchAnalyze

DEAR = ModelPrice(input_per_mtok=1_000_000, output_per_mtok=1_000_000)  # a dollar a token: one call spends it all


@pytest.fixture(scope="module")
def analysis_settings(analysis_settings):
    return analysis_settings.model_copy(update={
        "llm_prices": {analysis_settings.llm_model: DEAR}, "budget_run_usd": 0.5, "budget_batch_usd": 0.5})


def _task(corpus, n: int) -> dict:
    return dict(corpus[1][n].task_data)


async def test_an_analysis_stops_calling_the_model_once_its_budget_is_spent(
        corpus, analysis_client, analysis_worker, analysis_llm):
    task = _task(corpus, 0)
    before = analysis_llm.call_count
    handle = await analysis_client.start_workflow(
        AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=1.0, sandbox_wait_s=2),
        id=f"{analyze_workflow_id(task['jediTaskID'], task['status'])}:{uuid.uuid4().hex[:6]}", task_queue=Queue.MAIN)
    result = await handle.result()
    steps = {s.step: s for s in result.steps}
    assert analysis_llm.call_count - before == 1, analysis_llm.counts_by_schema  # the diagnosis, nothing after it
    assert steps["exploratory_investigation"].status == "budget_spent"
    assert result.email_subject and "model budget is spent" in " ".join(result.notes)
    assert result.spend.calls == 1 and result.spend.usd > 0.5 and result.spend.budget.run_usd == 0.5
    described = await handle.describe()
    assert described.typed_search_attributes.get(SPEND_USD) == pytest.approx(result.spend.usd)


async def test_a_batch_starts_no_analysis_once_its_budget_is_spent(corpus, analysis_client, analysis_worker, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for n in range(3):
        task = _task(corpus, n)
        (folder / f"{task['jediTaskID']}.json").write_text(json.dumps(task))
    bid = f"budget-{uuid.uuid4().hex[:6]}"
    result: BatchAnalyzeResult = await analysis_client.execute_workflow(
        BatchAnalyze.run, BatchAnalyzeInput(batch_id=bid, path=str(folder), concurrency=1),
        id=f"analyze-batch:{bid}", task_queue=Queue.MAIN)
    assert result.budget_spent and result.total == 3 and result.done == 1, result
    assert result.spend.calls >= 1 and result.spend.usd > 0.5


async def test_finished_analyses_are_collected_several_at_a_time(tmp_path):
    """One server lookup at a time, in silence: 50,000 tasks kept analyze-batch quiet for over a minute."""
    import asyncio

    from bamboo.analysis.contract import result_file_name
    from bamboo.cli.analyze_cmd import COLLECT_AT_ONCE, collect_finished

    class Server:
        def __init__(self) -> None:
            self.now = self.most = 0

        async def finished_result(self, wid: str):
            self.now += 1
            self.most = max(self.most, self.now)
            await asyncio.sleep(0.01)
            self.now -= 1
            done = AnalysisResult(task_id=int(wid.split(":")[1]), status="failed", root_cause="x", is_novel=False,
                                  confidence=0.5, resolution="y", explanation="z")
            return done if wid.endswith("failed") else None

    server = Server()
    ids = [f"analyze:{i}:{'failed' if i % 2 else 'running'}" for i in range(100)]
    (tmp_path / result_file_name(ids[1])).write_text("{}")  # collected before: not asked again
    assert await collect_finished(server, ids, tmp_path) == 49
    assert 1 < server.most <= COLLECT_AT_ONCE
    assert (tmp_path / result_file_name(ids[3])).exists() and not (tmp_path / result_file_name(ids[2])).exists()
