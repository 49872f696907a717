"""The capacity benchmark's history counts: what each event adds, and when a run is settled."""

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.capacity.histories import HistoryCounts, activity_types, count

E = EventType


def _event(kind: "E.ValueType", activity: str | None = None) -> HistoryEvent:
    event = HistoryEvent(event_type=kind)
    if activity is not None:
        event.activity_task_scheduled_event_attributes.activity_type.name = activity
    return event


def test_counts_tasks_activities_and_actions():
    events = [
        _event(E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        _event(E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        _event(E.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        _event(E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        _event(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "learn_slice"),
        _event(E.EVENT_TYPE_TIMER_STARTED),
        _event(E.EVENT_TYPE_MARKER_RECORDED),
        _event(E.EVENT_TYPE_ACTIVITY_TASK_STARTED),
    ]
    c = count(events)
    assert (c.runs, c.events, c.workflow_tasks, c.workflow_tasks_closed) == (1, 8, 1, 1)
    assert (c.activities, c.activities_closed, c.timers, c.local_activities) == (1, 0, 1, 1)
    assert c.actions == 4  # the start, the activity, the timer, the local activity
    assert c.bytes == sum(e.ByteSize() for e in events)
    assert not c.settled  # the activity is still running
    assert activity_types(events) == {"learn_slice": 1}


def test_settled_once_every_task_closed_and_counts_add_up():
    events = [
        _event(E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        _event(E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        _event(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "investigation_audit"),
        _event(E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED),
    ]
    one = count(events)
    assert one.settled
    assert not count(events[:1]).settled  # a workflow task waits to be answered
    both = one + one
    assert (both.runs, both.events, both.activities) == (2, 8, 2)
    assert HistoryCounts() + one == one
