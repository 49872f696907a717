"""Steering and following batches from any process: start one (held from its first step when asked), list
them, read a batch's progress, pause, resume or cancel it.

Every batch workflow (PopulateBatch, BatchAnalyze) answers the same signals and query, so one client serves
both; the feature clients (``bamboo.accumulation.client.PopulateClient``,
``bamboo.analysis.client.AnalysisClient``) start their batches through it and hand back the same
``BatchHandle``. Front ends call this module instead of Temporal (docs/adding-a-front-end.md) and never
spell a signal or query: the names are the batch contract's (``BATCH_SIGNALS``, ``PROGRESS_QUERY``).

It knows no feature's models (the feature contracts import the batch contract, so the reverse would be an
import cycle): whoever lists batches says which progress model each kind answers with (``progress_types``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client, WorkflowFailureError, WorkflowHandle, WorkflowQueryFailedError, WorkflowQueryRejectedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from bamboo.batch.contract import BATCH_SIGNALS, CANCEL_SIGNAL, PAUSE_SIGNAL, PROGRESS_QUERY, RESUME_SIGNAL
from bamboo.batch.contract import BatchProgress, BatchResult, BatchState
from bamboo.contract import BATCH, KIND, Kind, Queue

BATCH_KINDS = (Kind.POPULATE, Kind.ANALYZE_BATCH)
# Built from the contract's search attribute and kinds, so a rename there reaches every listing.
BATCHES_QUERY = " OR ".join(f"{KIND.name} = '{kind}'" for kind in BATCH_KINDS)
# A batch whose worker is gone must not hold a listing: its row says so after this long.
PROGRESS_TIMEOUT_S = 5.0

P = TypeVar("P")  # a batch's progress model (a BatchProgress, or whatever its query answers)
R = TypeVar("R")  # a batch's result model


class BatchError(RuntimeError):
    """Something the operator must fix: no such batch, not a batch, not running, an unknown action."""


class BatchNotFound(BatchError):
    """Temporal has no workflow of that id."""

    def __init__(self, workflow_id: str, detail: str) -> None:
        super().__init__(f"no batch {workflow_id}: {detail}")
        self.workflow_id = workflow_id


class BatchHandle(Generic[P, R]):
    """One batch as a client follows it: its id, whether it still runs, its progress, its result, and the
    three controls. A batch's own client may read its progress its own way (``PopulateHandle`` adds its
    running slices' heartbeats) by overriding ``progress``."""

    def __init__(self, handle: WorkflowHandle[Any, R], progress_type: type[P]) -> None:
        self.handle = handle
        self.progress_type = progress_type

    @property
    def id(self) -> str:
        return self.handle.id

    async def status(self) -> str | None:
        """Temporal's word for the batch's run ("running", "completed", …); None when there is no such batch.
        Answered by the server, without a worker."""
        try:
            desc = await self.handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return desc.status.name.lower() if desc.status else None

    async def running(self) -> bool:
        """Whether the batch has not ended (a run between continue-as-new counts as running)."""
        desc = await self.handle.describe()
        return desc.status is None or desc.status.name == "RUNNING"

    async def progress(self, timeout_s: float | None = None) -> P:
        """The batch's ``progress`` query; needs a worker (``timeout_s`` bounds the wait for one)."""
        return await self.handle.query(
            PROGRESS_QUERY, result_type=self.progress_type,
            rpc_timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None)

    async def result(self) -> R:
        return await self.handle.result()

    async def pause(self) -> None:
        """Start nothing new; what runs finishes."""
        await self.handle.signal(PAUSE_SIGNAL)

    async def resume(self) -> None:
        await self.handle.signal(RESUME_SIGNAL)

    async def cancel(self) -> None:
        """Start nothing new and end once what runs has finished; what was done stays."""
        await self.handle.signal(CANCEL_SIGNAL)


class BatchSummary(BaseModel):
    """One batch as the server lists it: its progress while it runs, its final counts once it completed (or
    why either could not be read)."""

    workflow_id: str
    kind: str
    status: str
    started: datetime
    progress: BatchProgress | None = None
    result: BatchResult | None = None
    detail: str = ""


class BatchClient:
    """The operator API of batches, bound to one Temporal client: what the console's batches page and the
    feature clients call. ``progress_types`` names the progress model each batch kind answers with (a kind
    not named is read as the plain ``BatchProgress``)."""

    def __init__(self, client: Client, progress_types: Mapping[str, type[BatchProgress]] | None = None, *,
                 progress_timeout_s: float = PROGRESS_TIMEOUT_S) -> None:
        self.client = client
        self.progress_types = dict(progress_types or {})
        self.progress_timeout_s = progress_timeout_s

    def handle(self, workflow_id: str, progress_type: type[P], result_type: type[R] | None = None) -> BatchHandle[P, R]:
        """The batch of that workflow id, without asking the server whether it exists (``BatchHandle.status``)."""
        return BatchHandle(self.client.get_workflow_handle(workflow_id, result_type=result_type), progress_type)

    async def start(self, workflow: str, inp: BatchState, *, workflow_id: str, kind: Kind, progress_type: type[P],
                    result_type: type[R], queue: str = Queue.MAIN, paused: bool = False) -> BatchHandle[P, R]:
        """Start the batch, or attach to it when one of that id runs (the same batch is never started twice).

        ``paused`` sends the pause with the start: the batch takes its input before any signal, so it is held
        before anything runs (a pause sent after the start can arrive after the first items were handed out).
        The batch's kind and id are set at the start, not only when its first workflow task runs, so it is
        listed, and can be steered here, from the moment it exists."""
        attrs: list[SearchAttributePair[Any]] = [SearchAttributePair(KIND, kind.value),
                                                  SearchAttributePair(BATCH, inp.batch_id)]
        handle = await self.client.start_workflow(
            workflow, inp, id=workflow_id, task_queue=queue, result_type=result_type,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            search_attributes=TypedSearchAttributes(attrs),
            start_signal=PAUSE_SIGNAL if paused else None,
        )
        return BatchHandle(handle, progress_type)

    async def batches(self, limit: int = 50) -> list[BatchSummary]:
        """Every populate and analyze batch, newest first, each running one with its progress. A batch whose
        progress cannot be read (no worker, a failing workflow task, an older shape) says why in ``detail``
        and the others are still listed."""
        rows = []
        async for execution in self.client.list_workflows(BATCHES_QUERY, limit=limit):
            kind = execution.typed_search_attributes.get(KIND) or ""
            status = execution.status.name.lower() if execution.status else "unknown"
            row = BatchSummary(workflow_id=execution.id, kind=kind, status=status, started=execution.start_time)
            if status == "running":
                try:
                    row.progress = await self.progress(execution.id, kind)
                except BatchError as exc:
                    row.detail = f"progress unavailable: {exc}"
            elif status == "completed":  # the counts every batch result carries, read from its closing event
                try:
                    row.result = await self.client.get_workflow_handle(execution.id, result_type=BatchResult).result()
                except (RPCError, WorkflowFailureError, TypeError, ValueError) as exc:
                    row.detail = f"result unavailable: {type(exc).__name__}"
            rows.append(row)
        return rows

    async def progress(self, workflow_id: str, kind: str | None = None) -> BatchProgress:
        """One batch's progress, read as its kind's model; a batch that cannot answer raises BatchError."""
        progress_type = self.progress_types.get(kind or "", BatchProgress)
        try:
            return await self.handle(workflow_id, progress_type).progress(self.progress_timeout_s)
        except RPCError as exc:
            raise BatchError(exc.message) from None
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            # The batch is finishing, its workflow task is failing, or it is of another shape.
            raise BatchError(str(exc)) from None
        except (TypeError, ValueError) as exc:  # the answer does not decode as this version's progress
            raise BatchError(f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None

    async def pause(self, workflow_id: str) -> None:
        await self.control(workflow_id, PAUSE_SIGNAL)

    async def resume(self, workflow_id: str) -> None:
        await self.control(workflow_id, RESUME_SIGNAL)

    async def cancel(self, workflow_id: str) -> None:
        await self.control(workflow_id, CANCEL_SIGNAL)

    async def control(self, workflow_id: str, action: str) -> None:
        """Send one of the batch contract's signals (``BATCH_SIGNALS``) to a running batch; a workflow that is
        not a batch is refused, so a caller passing an id from a form cannot signal a session with it."""
        if action not in BATCH_SIGNALS:
            raise BatchError(f"unknown batch action {action!r}; use one of {', '.join(BATCH_SIGNALS)}")
        handle = self.client.get_workflow_handle(workflow_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            raise BatchNotFound(workflow_id, exc.message) from None
        if desc.typed_search_attributes.get(KIND) not in BATCH_KINDS:
            raise BatchError(f"{workflow_id} is not a populate or analyze batch")
        if desc.status is None or desc.status.name != "RUNNING":
            raise BatchError(f"batch {workflow_id} is not running; it cannot be told to {action}")
        try:
            await handle.signal(action)
        except RPCError as exc:  # it finished between the look and the signal
            raise BatchError(f"batch {workflow_id} did not take the {action}: {exc.message}") from None
