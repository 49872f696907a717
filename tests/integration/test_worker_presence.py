"""A batch view says when no worker polls its queue (it used to look busy for ever after its worker died),
and says so again when one is back; the batch itself waits in Temporal, nothing lost."""

from __future__ import annotations

import asyncio
import io
import uuid
from dataclasses import dataclass

from rich.console import Console
from temporalio import workflow
from temporalio.worker import Worker

from bamboo.batch.client import BatchHandle
from bamboo.cli import batch_progress
from bamboo.cli.worker_presence import queue_has_worker


@dataclass
class _Progress:
    total: int = 1
    done: int = 0
    failed: int = 0
    skipped: int = 0
    running: int = 1
    paused: bool = False
    cancelled: bool = False


@workflow.defn(name="PresenceProbeBatch", sandboxed=False)  # a test module imports too much for the sandbox
class _Batch:
    def __init__(self) -> None:
        self.finish = False

    @workflow.run
    async def run(self) -> _Progress:
        await workflow.wait_condition(lambda: self.finish)
        return _Progress(done=1, running=0)

    @workflow.signal
    def end(self) -> None:
        self.finish = True

    @workflow.query
    def progress(self) -> _Progress:
        return _Progress()


async def test_the_view_says_when_no_worker_polls_the_batch_queue_and_when_one_is_back(client, monkeypatch):
    queue = f"presence-{uuid.uuid4().hex[:8]}"
    assert await queue_has_worker(client, queue) is False
    out = io.StringIO()
    monkeypatch.setattr(batch_progress, "console", Console(file=out, width=200, force_terminal=False))
    monkeypatch.setattr(batch_progress, "WORKER_CHECK_S", 0.2)
    monkeypatch.setattr(batch_progress, "WORKER_GRACE_S", 1.0)
    handle = await client.start_workflow(_Batch.run, id=f"presence-{uuid.uuid4().hex[:8]}", task_queue=queue,
                                         result_type=_Progress)
    view = asyncio.create_task(batch_progress.follow(BatchHandle(handle, _Progress), "attach again",
                                                     worker_queue=(client, queue)))
    try:
        await asyncio.sleep(0.6)
        assert "no worker" not in out.getvalue(), "a worker just started has a grace period to poll"
        for _ in range(100):
            if "no worker is polling task queue " + queue in out.getvalue():
                break
            await asyncio.sleep(0.1)
        assert "no worker is polling task queue " + queue in out.getvalue(), out.getvalue()
        assert "`bamboo dev up`" in out.getvalue() and not view.done()
        async with Worker(client, task_queue=queue, workflows=[_Batch]):
            for _ in range(150):
                if "a worker polls task queue" in out.getvalue():
                    break
                await asyncio.sleep(0.1)
            assert f"a worker polls task queue {queue} again" in out.getvalue(), out.getvalue()
            assert await queue_has_worker(client, queue) is True
            await handle.signal(_Batch.end)
            await asyncio.wait_for(view, 30)
    finally:
        view.cancel()
    assert out.getvalue().count("no worker is polling") == 1, "said once, not on every poll"
