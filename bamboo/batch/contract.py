"""The batch-control contract: what every batch workflow (PopulateBatch, BatchAnalyze) answers the same way,
and what every client that steers or follows a batch (the CLI, the console, the benchmarks) refers to.

- Messages: the `pause` / `resume` / `cancel` signals (no payload) and the `progress` query (a
  `BatchProgress`, which a batch may extend with its own fields). Names are compatibility data: a rename
  orphans running batches (docs/versioning.md).
- Models: the state a batch carries across continue-as-new (`BatchState`, which a batch's input extends),
  a failed item, the progress and the result every batch reports.

A batch takes its input in `@workflow.init`, so a `pause` sent with the start (`start_signal`) holds the
batch before anything runs (`workflows/batching.py`). Pure: pydantic models only, so workflows import it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# ---------------------------------------------------------------- names (compatibility data)
PAUSE_SIGNAL = "pause"  # start nothing new; what runs finishes
RESUME_SIGNAL = "resume"  # go on after a pause
CANCEL_SIGNAL = "cancel"  # start nothing new and end once what runs has finished; what was done stays
BATCH_SIGNALS = (PAUSE_SIGNAL, RESUME_SIGNAL, CANCEL_SIGNAL)
PROGRESS_QUERY = "progress"

MAX_KEPT_FAILURES = 500  # failed items a batch keeps with their reasons (all are counted)
RECENT_FAILURES = 20  # of which the progress shows the last


class FailedItem(BaseModel):
    """An item the batch could not do, with the reason an operator acts on."""

    index: int
    source: str
    reason: str


class BatchState(BaseModel):
    """What every batch carries across continue-as-new; a batch's input extends it with its own fields."""

    batch_id: str
    concurrency: int = Field(default=8, ge=1, le=256)
    cursor: int = Field(default=0, description="items of the listing handed out so far")
    done: int = 0
    skipped: int = 0
    failed: list[FailedItem] = Field(default_factory=list, description=f"the last {MAX_KEPT_FAILURES} failures")
    failed_count: int = 0
    paused: bool = False
    generation: int = Field(default=0, description="continue-as-new runs so far")

    def record_failure(self, index: int, source: str, reason: str) -> None:
        """Count a failed item and keep its reason; only the last MAX_KEPT_FAILURES reasons are kept, so
        a batch of a million bad files does not carry them all through continue-as-new."""
        self.failed_count += 1
        self.failed.append(FailedItem(index=index, source=source, reason=reason))
        del self.failed[:-MAX_KEPT_FAILURES]


class BatchProgress(BaseModel):
    """A batch's `progress` query: settled counts and what runs now (any batch, any client)."""

    batch_id: str
    total: int | None = Field(description="items in the listing; None until it is read")
    done: int
    skipped: int = 0
    failed: int
    running: int
    pending: int | None
    paused: bool
    cancelled: bool
    finished: bool
    generation: int
    recent_failures: list[FailedItem] = Field(default_factory=list)


class BatchResult(BaseModel):
    """What every batch returns; a batch's result extends it with its own fields."""

    batch_id: str
    total: int
    done: int
    skipped: int = 0
    failed: int
    cancelled: bool
    failures: list[FailedItem]
