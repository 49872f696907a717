"""What a workflow history costs Temporal, counted from its events: workflow tasks, activity tasks, local
activities, timers, messages, bytes, and an approximation of the billable actions a hosted Temporal counts.
Pure functions over the history's events, so they are tested without a server."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from typing import Any, Iterable

from temporalio.api.enums.v1 import EventType

E = EventType

# Events a hosted Temporal bills as an action (starting a run, an activity or a local activity, a timer,
# a signal or an accepted update, a child workflow, a search-attribute or memo change). An approximation:
# activity retries and heartbeats past the first, queries and updates refused by a validator also count
# there and are not in a history.
ACTION_EVENTS = frozenset({
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    E.EVENT_TYPE_MARKER_RECORDED,
    E.EVENT_TYPE_TIMER_STARTED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
})
ACTIVITY_CLOSED = frozenset({
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, E.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
})
WFT_CLOSED = frozenset({
    E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, E.EVENT_TYPE_WORKFLOW_TASK_FAILED, E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
})


@dataclass
class HistoryCounts:
    runs: int = 0
    events: int = 0
    bytes: int = 0
    workflow_tasks: int = 0
    workflow_tasks_closed: int = 0
    activities: int = 0
    activities_closed: int = 0
    local_activities: int = 0
    timers: int = 0
    signals: int = 0
    updates: int = 0
    actions: int = 0

    def __add__(self, other: HistoryCounts) -> HistoryCounts:
        return HistoryCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def settled(self) -> bool:
        """No workflow task and no activity is outstanding: the run waits for something from outside."""
        return self.workflow_tasks == self.workflow_tasks_closed and self.activities == self.activities_closed


def count(events: Iterable[Any]) -> HistoryCounts:
    """The counts of one run's history (``WorkflowHistory.events``: protobuf ``HistoryEvent``s)."""
    out = HistoryCounts(runs=1)
    for event in events:
        kind = event.event_type
        out.events += 1
        out.bytes += event.ByteSize()
        out.workflow_tasks += kind == E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
        out.workflow_tasks_closed += kind in WFT_CLOSED
        out.activities += kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        out.activities_closed += kind in ACTIVITY_CLOSED
        out.local_activities += kind == E.EVENT_TYPE_MARKER_RECORDED
        out.timers += kind == E.EVENT_TYPE_TIMER_STARTED
        out.signals += kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        out.updates += kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        out.actions += kind in ACTION_EVENTS
    return out


def activity_types(events: Iterable[Any]) -> Counter[str]:
    """How many times each activity type was scheduled in one run's history."""
    return Counter(e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                   if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
