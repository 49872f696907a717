"""BatchAnalyze: many AnalyzeTask children with the controls of PopulateBatch.

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
        AnalyzeInput, BatchAnalyzeInput, BatchAnalyzeProgress, BatchAnalyzeResult, BatchFailure,
        TaskListingInput, TaskPageInput, TaskSource,
    )
    from bamboo.contract import BATCH, KIND, SPEND_USD, Kind
    from bamboo.models.spend import over_budget
    from workflows.analyze import AnalyzeTask
    from workflows.batching import innermost_reason, run_bounded_children

MAX_KEPT_FAILURES = 500
PAGE = 100


@workflow.defn(name=contract.BATCH_ANALYZE_WORKFLOW)
class BatchAnalyze:
    @workflow.init
    def __init__(self, inp: BatchAnalyzeInput) -> None:
        # The input is taken before any signal is handled, so a pause sent with the start holds the batch.
        self._inp: BatchAnalyzeInput = inp
        self._running: set[int] = set()
        self._cancelled = False
        self._finished = False

    def _set_paused(self, paused: bool) -> None:
        if self._inp is not None:
            self._inp.paused = paused

    @workflow.signal
    def pause(self) -> None:
        self._set_paused(True)

    @workflow.signal
    def resume(self) -> None:
        self._set_paused(False)

    @workflow.signal
    def cancel(self) -> None:
        self._cancelled = True

    @workflow.query
    def progress(self) -> BatchAnalyzeProgress:
        inp = self._inp
        if inp is None:
            return BatchAnalyzeProgress(batch_id="", total=None, done=0, skipped=0, failed=0, running=0, pending=None,
                                        paused=False, cancelled=False, finished=False, generation=0)
        total = inp.listing.total if inp.listing else None
        return BatchAnalyzeProgress(
            batch_id=inp.batch_id, total=total, done=inp.done, skipped=inp.skipped, failed=inp.failed_count,
            running=len(self._running), pending=(total - inp.cursor) if total is not None else None,
            paused=inp.paused, cancelled=self._cancelled, finished=self._finished, generation=inp.generation,
            recent_failures=inp.failed[-20:],
        )

    @workflow.run
    async def run(self, inp: BatchAnalyzeInput) -> BatchAnalyzeResult:
        inp = self._inp  # the instance @workflow.init took, which signals may already have changed
        workflow.upsert_search_attributes([KIND.value_set(Kind.ANALYZE_BATCH.value), BATCH.value_set(inp.batch_id)])
        if inp.listing is None:
            try:
                fetched = await workflow.execute_activity(
                    contract.list_tasks, TaskListingInput(path=inp.path, skip_workflow_ids=inp.skip_workflow_ids),
                    **contract.LIST_STEP.options())
            except ActivityError as exc:
                self._finished = True
                raise ApplicationError(f"cannot list tasks at {inp.path}: {innermost_reason(exc)}", non_retryable=True)
            inp.listing = fetched
            inp.skipped = fetched.skipped
            inp.skip_workflow_ids = []  # applied to the listing; not carried through continue-as-new
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
        spend = self._inp.spend if self._inp else None
        return spend is not None and over_budget(spend.usd, spend.budget.batch_usd)

    async def _child(self, index: int, source: TaskSource) -> None:
        inp = self._inp
        assert inp is not None
        try:
            result = await workflow.execute_child_workflow(
                AnalyzeTask.run,
                AnalyzeInput(source_path=source.path, batch_id=inp.batch_id,
                             exploration_threshold=inp.exploration_threshold),
                id=source.workflow_id(), parent_close_policy=ParentClosePolicy.TERMINATE,
                execution_timeout=timedelta(hours=1),
            )
            inp.done += 1
            inp.spend = inp.spend.plus(result.spend)
            workflow.upsert_search_attributes([SPEND_USD.value_set(inp.spend.usd)])
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
            inp.failed_count += 1
            reason = (f"another analysis with id {source.workflow_id()} is running"
                      if isinstance(exc, WorkflowAlreadyStartedError) else innermost_reason(exc))
            inp.failed.append(BatchFailure(index=index, source=source.path, reason=reason))
            del inp.failed[:-MAX_KEPT_FAILURES]
        finally:
            self._running.discard(index)
