"""BatchAnalyze: many AnalyzeTask children, steered and followed like every batch (`workflows/batching.py`).

Bounded concurrency, `pause` / `resume` / `cancel`, a `progress` query, continue-as-new every N items;
tasks already analysed (named by the starter) are skipped, not redone. Kept apart from AnalyzeTask so
that a change to one analysis and a change to batch control are edits to different files.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.analysis import contract
    from bamboo.analysis.contract import (
        AnalyzeInput, BatchAnalyzeInput, BatchAnalyzeResult, TaskListingInput, TaskPageInput, TaskSource,
    )
    from bamboo.batch.contract import BatchProgress
    from bamboo.contract import SPEND_USD, Kind
    from bamboo.models.spend import over_budget
    from workflows.analyze import AnalyzeTask
    from workflows.batching import BatchControl, innermost_reason, run_bounded_children

PAGE = 100


@workflow.defn(name=contract.BATCH_ANALYZE_WORKFLOW)
class BatchAnalyze(BatchControl[BatchAnalyzeInput]):
    @workflow.init
    def __init__(self, inp: BatchAnalyzeInput) -> None:
        super().__init__(inp)
        self._running: set[int] = set()

    def _progress(self) -> BatchProgress:
        inp = self._inp
        total = inp.listing.total if inp.listing else None
        return BatchProgress(**self._counts(total, running=len(self._running),
                                            pending=(total - inp.cursor) if total is not None else None))

    @workflow.run
    async def run(self, inp: BatchAnalyzeInput) -> BatchAnalyzeResult:
        inp = self._inp  # the instance @workflow.init took, which signals may already have changed
        self._announce(Kind.ANALYZE_BATCH)
        if inp.listing is None:
            try:
                fetched = await workflow.execute_activity(
                    contract.list_tasks, TaskListingInput(path=inp.path, results_dir=inp.results_dir),
                    **contract.LIST_STEP.options())
            except ActivityError as exc:
                self._finished = True
                raise ApplicationError(f"cannot list tasks at {inp.path}: {innermost_reason(exc)}", non_retryable=True)
            inp.listing = fetched
            inp.skipped = fetched.skipped
        listing = inp.listing

        async def read_page(offset: int) -> list[TaskSource]:
            return await workflow.execute_activity(
                contract.read_tasks, TaskPageInput(ref=listing.ref, offset=offset, limit=PAGE),
                **contract.PAGE_STEP.options())

        await run_bounded_children(inp, listing.total, read_page, self._child, self._running,
                                   lambda: self._cancelled or self._budget_spent())
        self._finished = True
        return BatchAnalyzeResult(batch_id=inp.batch_id, total=listing.total + inp.skipped, done=inp.done,
                                  skipped=inp.skipped, failed=inp.failed_count, cancelled=self._cancelled,
                                  failures=inp.failed, spend=inp.spend, budget_spent=self._budget_spent())

    def _budget_spent(self) -> bool:
        """Once the batch's analyses spent its budget no new one starts (running ones finish)."""
        spend = self._inp.spend
        return over_budget(spend.usd, spend.budget.batch_usd)

    async def _child(self, index: int, source: TaskSource) -> None:
        inp = self._inp
        try:
            result = await workflow.execute_child_workflow(
                AnalyzeTask.run,
                AnalyzeInput(source_path=source.path, batch_id=inp.batch_id,
                             exploration_threshold=inp.exploration_threshold,
                             model_deadline_s=inp.model_deadline_s),
                id=source.workflow_id(), parent_close_policy=ParentClosePolicy.TERMINATE,
                execution_timeout=timedelta(hours=1),
            )
            inp.done += 1
            inp.spend = inp.spend.plus(result.spend)
            workflow.upsert_search_attributes([SPEND_USD.value_set(inp.spend.usd)])
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
            self._failed(index, source.path, f"another analysis with id {source.workflow_id()} is running"
                         if isinstance(exc, WorkflowAlreadyStartedError) else innermost_reason(exc))
        finally:
            self._running.discard(index)
