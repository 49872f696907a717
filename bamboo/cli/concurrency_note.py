"""What a batch's `--concurrency` will actually get, said when the batch starts.

A batch asks for model calls at once; each worker makes at most its `BAMBOO_LLM_CONCURRENCY` at once
(`bamboo.worker_slots`), so a batch asking more than the workers offer used to run slower without a
word. The note reads the workers' published slots from Temporal's pollers of the LLM queue.
"""

from __future__ import annotations


from temporalio.api.enums.v1 import TaskQueueType
from temporalio.client import Client

from bamboo.cli.worker_presence import POLLER_FRESH_S, fresh_pollers
from bamboo.contract import Queue
from bamboo.worker_slots import SETTING, Offer, offer


async def llm_offer(client: Client, queue: str = Queue.LLM, fresh_s: float = POLLER_FRESH_S) -> Offer | None:
    """The slots of the workers seen polling `queue` for activities within `fresh_s`; None when Temporal
    cannot say."""
    alive = await fresh_pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, fresh_s)
    return None if alive is None else offer(alive)


def concurrency_note(asked: int, found: Offer | None, queue: str = Queue.LLM) -> str:
    """One line: the model calls the batch gets at most, and which setting limits it."""
    if found is None:
        return f"concurrency {asked}: Temporal did not say which workers poll task queue {queue}"
    if found.workers == 0:
        return (f"concurrency {asked}: no worker polls task queue {queue} yet; the batch waits, and gets at most "
                f"the {SETTING} of the workers that start")
    if found.unpublished:
        return (f"concurrency {asked}: {found.unpublished} of the {found.workers} worker(s) polling task queue "
                f"{queue} do not publish their {SETTING} (an older worker?), so the limit cannot be told")
    granted = found.granted(asked)
    one = found.workers == 1
    workers = "the worker" if one else f"the {found.workers} workers"
    if granted is not None and granted < asked:
        return (f"concurrency {asked} asked, the batch gets at most {granted} model calls at once: limited by "
                f"{SETTING} of {workers} polling task queue {queue} ({found.slots} in all); raise it on the "
                "worker or start more workers")
    return (f"concurrency {asked}: up to {asked} model calls at once ({workers} polling task queue {queue} "
            f"{'offers' if one else 'offer'} {found.slots})")
