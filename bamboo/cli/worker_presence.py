"""Whether any worker polls a task queue, for views that wait on a batch.

A batch waits in Temporal while no worker runs (nothing is lost; it goes on when one starts), so a view that
only polls the batch's progress looked busy for ever after its worker died. Temporal lists the pollers
it saw on a queue with the time of each one's last poll; a worker long-polls about once a minute, so one
seen within POLLER_FRESH_S is alive.
"""

from __future__ import annotations

from datetime import datetime, timezone

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

POLLER_FRESH_S = 90.0


async def fresh_pollers(client: Client, queue: str, kind: TaskQueueType.ValueType,
                        fresh_s: float = POLLER_FRESH_S) -> list[tuple[str, float]] | None:
    """(identity, last poll as a timestamp) of each worker seen polling ``queue`` for ``kind`` tasks within
    ``fresh_s`` (one Temporal has no time for counts as seen now); None when Temporal cannot say."""
    try:
        reply = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind))
    except RPCError:
        return None
    now = datetime.now(timezone.utc)
    alive = []
    for poller in reply.pollers:
        seen = poller.last_access_time.ToDatetime(tzinfo=timezone.utc) if poller.HasField("last_access_time") else now
        if (now - seen).total_seconds() <= fresh_s:
            alive.append((poller.identity, seen.timestamp()))
    return alive


async def queue_has_worker(client: Client, queue: str, fresh_s: float = POLLER_FRESH_S) -> bool | None:
    """True when a worker polled ``queue`` for workflow tasks within ``fresh_s``; None when Temporal cannot say."""
    alive = await fresh_pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, fresh_s)
    return None if alive is None else bool(alive)


def no_worker_hint(queue: str) -> str:
    return (f"no worker is polling task queue {queue}; the batch waits, nothing is lost: start one with "
            "`bamboo dev up` (embedded stack) or `bamboo worker`")
