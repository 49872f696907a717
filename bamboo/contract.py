"""What every feature's contract builds on: task queues, search attributes, activity option presets, and
the link between an activity's contract stub and its implementation.

A feature's contract module (``bamboo/<feature>/contract.py``) holds its workflow and activity names, its
input and output models, its messages and the search attributes it sets, and is imported by the
workflow, the activities, the worker and the clients alike, so "go to definition" leads from a workflow's
call to the activity's contract and nothing is spelled twice (docs/architecture.md). Contract modules are
pure: pydantic models and temporalio's definition decorators, nothing that does I/O, so a workflow may
import them freely.

An activity is declared once in its contract as a *stub*: an ``async def`` decorated with
``@activity_stub("name")`` whose body is ``...``. A workflow calls the stub itself
(``workflow.execute_activity(contract.codegen, inp, **LLM_CALL.options())``); the implementation, an
ordinary method in ``activities/``, is marked ``@implements(contract.codegen)``, which registers it under
the stub's name and refuses a signature that differs from the stub's.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from temporalio import activity
from temporalio.common import RetryPolicy, SearchAttributeKey

F = TypeVar("F", bound=Callable[..., Any])


class Queue(StrEnum):
    """Task queues: workflows on the main queue; LLM-bound, store-bound and sandbox activities on their own
    queues, so each is scaled and concurrency-limited separately (sandbox workers on hardened hosts)."""

    MAIN = "bamboo"
    LLM = "bamboo-llm"
    STORE = "bamboo-store"
    SANDBOX = "bamboo-sandbox"


class Kind(StrEnum):
    """Values of ``BambooKind``: what a run is, for Temporal Web filters."""

    ACCUMULATE = "accumulate"
    POPULATE = "populate"
    ANALYZE = "analyze"
    ANALYZE_BATCH = "analyze-batch"
    INVESTIGATE = "investigate"


# Search attributes are compatibility data: the embedded dev server registers these at start-up and a
# cluster operator registers the same (`temporal operator search-attribute create`).
KIND = SearchAttributeKey.for_keyword("BambooKind")
TASK_ID = SearchAttributeKey.for_int("BambooTaskId")
BATCH = SearchAttributeKey.for_keyword("BambooBatchId")
AWAITING_APPROVAL = SearchAttributeKey.for_bool("BambooAwaitingApproval")
SPEND_USD = SearchAttributeKey.for_float("BambooSpendUsd")  # model spend of the run, session or batch so far
SEARCH_ATTRIBUTES: dict[str, str] = {
    KIND.name: "Keyword", TASK_ID.name: "Int", BATCH.name: "Keyword", AWAITING_APPROVAL.name: "Bool",
    SPEND_USD.name: "Double",
}

# A dead worker's activity is retried after this long, not after its start-to-close timeout.
HEARTBEAT = timedelta(seconds=10)
# How far apart a worker sends an activity's heartbeats to the server at most. Activities beat every third
# of HEARTBEAT so that two beats may be late before the worker is taken for dead, but Temporal's SDK sends
# them no more often than 0.8 x the heartbeat timeout unless the worker caps it: 8 s of 10, so a 2 s stall
# on a loaded machine timed a live activity out (a slice waiting out a database outage was retried and its
# extracted incidents went to the model again). Every worker passes this as max_heartbeat_throttle_interval.
HEARTBEAT_SENT_EVERY = HEARTBEAT / 3
LLM_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                        maximum_interval=timedelta(seconds=30), maximum_attempts=6)
STORE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10),
                          maximum_attempts=10)


class ActivityOptions(BaseModel):
    """A named set of options for calling activities; ``options()`` gives the keyword arguments."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    task_queue: Queue
    start_to_close: timedelta
    heartbeat: timedelta | None = None
    schedule_to_start: timedelta | None = None
    schedule_to_close: timedelta | None = None
    retry: RetryPolicy | None = None

    def options(self, **overrides: Any) -> dict[str, Any]:
        values: dict[str, Any] = {"task_queue": self.task_queue.value, "start_to_close_timeout": self.start_to_close}
        if self.heartbeat is not None:
            values["heartbeat_timeout"] = self.heartbeat
        if self.schedule_to_start is not None:
            values["schedule_to_start_timeout"] = self.schedule_to_start
        if self.schedule_to_close is not None:
            values["schedule_to_close_timeout"] = self.schedule_to_close
        if self.retry is not None:
            values["retry_policy"] = self.retry
        values.update(overrides)
        return values

    def but(self, **changes: Any) -> "ActivityOptions":
        return self.model_copy(update=changes)


# The presets every feature starts from (a contract may derive its own with ``but``).
LLM_CALL = ActivityOptions(task_queue=Queue.LLM, start_to_close=timedelta(minutes=5), heartbeat=HEARTBEAT,
                           retry=LLM_RETRY)
STORE_CALL = ActivityOptions(task_queue=Queue.STORE, start_to_close=timedelta(minutes=1), retry=STORE_RETRY)


def llm_call_within(deadline: timedelta) -> ActivityOptions:
    """LLM_CALL for a step its caller waits for at most ``deadline``, every attempt included.

    LLM_CALL's fixed five minutes and six attempts made a slow model hold a caller for half an hour per step
    whatever the deployment's ``BAMBOO_LLM_TIMEOUT_S`` said (issue 30). Here one attempt may use the whole
    deadline (a model slower than five minutes is waited for when the setting allows it) and quick transient
    failures are retried only while the deadline lasts; when it passes the step fails with a timeout, which
    the caller reads as "the model is too slow for this deadline", not as a fault to retry."""
    return LLM_CALL.but(start_to_close=deadline, schedule_to_close=deadline)


_NAME_ATTRIBUTE = "__bamboo_activity_name__"


def activity_stub(name: str) -> Callable[[F], F]:
    """Declare an activity in a contract: its name (compatibility data) and, through the stub's
    annotations, its input and result types. The body is ``...``; the worker registers the implementation."""

    def decorate(fn: F) -> F:
        setattr(fn, _NAME_ATTRIBUTE, name)
        return activity.defn(name=name)(fn)

    return decorate


def activity_name(stub: Callable[..., Any]) -> str:
    """The registered name of an activity stub or of an implementation marked with ``implements``."""
    name = getattr(stub, _NAME_ATTRIBUTE, None)
    if not isinstance(name, str):
        raise TypeError(f"{stub!r} is not an activity stub of a contract")
    return name


def _signature(fn: Callable[..., Any], *, bound: bool) -> tuple[list[Any], Any]:
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values()]
    if bound:
        params = params[1:]
    return [hints.get(p.name, Any) for p in params], hints.get("return", Any)


def implements(stub: Callable[..., Any]) -> Callable[[F], F]:
    """Register the decorated method (or function) as the implementation of ``stub``.

    The stub's name is the registered name, and the implementation must take and return exactly the
    stub's types, so a drift between contract and implementation fails at import time, not in a history.
    """
    name = activity_name(stub)

    def decorate(fn: F) -> F:
        bound = "self" in inspect.signature(fn).parameters
        if _signature(fn, bound=bound) != _signature(stub, bound=False):
            raise TypeError(f"{fn.__qualname__} does not match the contract of activity {name!r}: "
                            f"{_signature(fn, bound=bound)} != {_signature(stub, bound=False)}")
        setattr(fn, _NAME_ATTRIBUTE, name)
        return activity.defn(name=name)(fn)

    return decorate
