"""What a worker offers a batch, published where any client can read it: its poller identity.

Temporal lists the pollers it has seen on a task queue with each one's identity and the time of its
last poll (DescribeTaskQueue). The worker appends its model-call slots to the identity it polls with
(`1234@host llm-slots=32`), so `bamboo populate` can say at start what a batch's `--concurrency` will
actually get, read from the workers' real configuration rather than guessed from the client's.

What it costs: nothing on the worker (no row to keep, no extra call); one RPC when a client starts a
batch; the slots show beside each poller in Temporal Web. What it cannot see: a worker that has not
polled yet, and a worker stopped less than a poll ago still counts (`bamboo.cli.worker_presence`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SETTING = "BAMBOO_LLM_CONCURRENCY"
_MARK = "llm-slots="
_SLOTS = re.compile(r"(?:^|\s)llm-slots=(\d+)(?:\s|$)")


def with_llm_slots(identity: str, slots: int) -> str:
    """The identity a worker polls with: its usual one, and how many model calls it makes at once."""
    return f"{identity} {_MARK}{slots}"


def llm_slots(identity: str) -> int | None:
    """The slots a poller's identity publishes; None for a worker that publishes none."""
    found = _SLOTS.search(identity)
    return int(found.group(1)) if found else None


def _process(identity: str) -> str:
    """The identity without its slots: one worker process, whichever slots it polled with."""
    return _SLOTS.sub(" ", identity).strip()


@dataclass(frozen=True)
class Offer:
    """The model-call slots the workers polling the LLM queue offer together."""

    workers: int  # worker processes seen polling
    slots: int  # their published slots, summed
    unpublished: int = 0  # workers whose identity names no slots (an older worker, another SDK)

    def granted(self, asked: int) -> int | None:
        """What a batch asking `asked` model calls gets at most; None when it cannot be told."""
        if self.workers == 0 or self.unpublished:
            return None
        return min(asked, self.slots)


def offer(pollers: Iterable[tuple[str, float]]) -> Offer:
    """The offer of the pollers `(identity, last poll as a timestamp)` a client saw as alive.

    A process that polled with different slots (a worker restarted with a new setting under the same
    identity, as tests do in one process) counts once, with its latest slots."""
    latest: dict[str, tuple[float, int | None]] = {}
    for identity, seen in pollers:
        process = _process(identity)
        if process not in latest or seen >= latest[process][0]:
            latest[process] = (seen, llm_slots(identity))
    slots = [s for _, s in latest.values()]
    return Offer(workers=len(slots), slots=sum(s for s in slots if s is not None),
                 unpublished=sum(1 for s in slots if s is None))
