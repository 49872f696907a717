"""PopulateBatch: run AccumulateIncident over thousands of incidents, durably.

Bounded concurrency of child workflows; a failed item is recorded with its reason and the batch
goes on; `pause` / `resume` / `cancel` signals and a `progress` query; continue-as-new every N
items (after draining running children) keeps the history small however long the batch is.
Children are named `accumulate:<batch>:<index>`, so a replayed or restarted batch never starts an
item twice.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from bamboo.models.accumulate import (
        AccumulateInput, AccumulateResult, FailedItem, IncidentSource, PopulateInput, PopulateProgress,
        PopulateResult, SourceListing, SourcePageInput,
    )
    from workflows import names
    from workflows.accumulate import AccumulateIncident
    from workflows.batching import innermost_reason, run_bounded_children
    from workflows.common import BATCH, KIND
    from workflows.queues import Queues

MAX_KEPT_FAILURES = 500
PAGE = 100


@workflow.defn(name=names.POPULATE_WORKFLOW)
class PopulateBatch:
    def __init__(self) -> None:
        self._inp: PopulateInput | None = None
        self._running: set[int] = set()
        self._cancelled = False
        self._finished = False

    # ---------------------------------------------------------------- messages
    @workflow.signal
    def pause(self) -> None:
        if self._inp:
            self._inp.paused = True

    @workflow.signal
    def resume(self) -> None:
        if self._inp:
            self._inp.paused = False

    @workflow.signal
    def cancel(self) -> None:
        self._cancelled = True

    @workflow.query
    def progress(self) -> PopulateProgress:
        inp = self._inp
        if inp is None:
            return PopulateProgress(batch_id="", total=None, done=0, failed=0, running=0, pending=None, paused=False,
                                    cancelled=False, finished=False, generation=0)
        total = inp.listing.total if inp.listing else None
        return PopulateProgress(
            batch_id=inp.batch_id, total=total, done=inp.done, failed=inp.failed_count, running=len(self._running),
            pending=(total - inp.cursor) if total is not None else None, paused=inp.paused, cancelled=self._cancelled,
            finished=self._finished, generation=inp.generation, recent_failures=inp.failed[-20:],
            listing_error=inp.listing_error,
        )

    # ---------------------------------------------------------------- run
    @workflow.run
    async def run(self, inp: PopulateInput) -> PopulateResult:
        self._inp = inp
        q = Queues()
        workflow.upsert_search_attributes([KIND.value_set("populate"), BATCH.value_set(inp.batch_id)])
        if inp.listing is None:
            try:
                inp.listing = await workflow.execute_activity(
                    names.LIST_INCIDENT_SOURCES, inp.path, result_type=SourceListing, task_queue=q.store,
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=RetryPolicy(maximum_attempts=5),
                )
            except ActivityError as exc:
                inp.listing_error = innermost_reason(exc)
                self._finished = True
                raise ApplicationError(f"cannot list incidents at {inp.path}: {inp.listing_error}", non_retryable=True)
        listing = inp.listing

        async def read_page(offset: int) -> list[IncidentSource]:
            return await workflow.execute_activity(
                names.READ_INCIDENT_SOURCES, SourcePageInput(ref=listing.ref, offset=offset, limit=PAGE),
                result_type=list[IncidentSource], task_queue=q.store,
                start_to_close_timeout=timedelta(seconds=20), retry_policy=RetryPolicy(maximum_attempts=10),
            )

        await run_bounded_children(inp, listing.total, read_page, self._child, self._running, lambda: self._cancelled)
        self._finished = True
        return PopulateResult(batch_id=inp.batch_id, total=listing.total, done=inp.done, failed=inp.failed_count,
                              cancelled=self._cancelled, failures=inp.failed)

    async def _child(self, index: int, source: IncidentSource) -> None:
        inp = self._inp
        assert inp is not None
        try:
            await workflow.execute_child_workflow(
                AccumulateIncident.run,
                AccumulateInput(source=source, batch_id=inp.batch_id, max_review_retries=inp.max_review_retries),
                id=f"accumulate:{inp.batch_id}:{index}",
                result_type=AccumulateResult,
                parent_close_policy=ParentClosePolicy.TERMINATE,
                execution_timeout=timedelta(hours=2),
            )
            inp.done += 1
        except ChildWorkflowError as exc:
            inp.failed_count += 1
            inp.failed.append(FailedItem(index=index, source=source.label(), reason=innermost_reason(exc)))
            del inp.failed[:-MAX_KEPT_FAILURES]
        finally:
            self._running.discard(index)
