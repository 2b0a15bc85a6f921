"""Administrative events in the streaming path: group keys, the admin log, and wake-ups.

WIPE/ADD_WRITE_PERM name one brokerName and PUT/DELETE_KV the one KV store, so they are keyed
to that group like broker events. DELETE_TOPIC touches every group holding the topic at its
eventTime, and those groups' own events may arrive in other micro-batches. It reaches them by
three paths (docs/architecture.md has the argument that together they are exact):

* the admin log: every DELETE_TOPIC is recorded (the admin_events table) by the batch it
  arrives in; a group merges the logged ones newer than its clock whenever its step runs;
* fan-out: on arrival, a copy goes to every group that holds the topic in the published
  topicQueueTable, so a group with nothing else to do is woken when the watermark passes it;
* a group whose topics grew in a step wakes at the next watermark move, to merge the log
  entries that arrived in that step's batch (it was not in the published table yet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from routing_lib.core.catalog import ADMIN_EVENTS as ADMIN_EVENTS
from routing_lib.core.clock import Arrival, GroupClock
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import Event, topic_names
from schemas.route_event import DeleteKvEvent, DeleteTopicEvent, PutKvEvent, RegisterEvent

# Group keys that are not broker names (a broker name is never empty, so these cannot clash).
ADMIN_KEY = "\x00admin"  # DELETE_TOPIC as it arrives: logged here, fanned out to holders
KV_KEY = "\x00kv"  # the KV store (KVConfigManager) is one global group


def group_key(event: Event) -> str:
    """The state group an event is keyed to (a broker event's or WRITE_PERM's brokerName)."""
    if isinstance(event, DeleteTopicEvent):
        return ADMIN_KEY
    if isinstance(event, PutKvEvent | DeleteKvEvent):
        return KV_KEY
    return event.brokerName


def admin_row(event: Event, arrival: Arrival, event_date: str) -> dict[str, Any]:
    """The admin_events row of one administrative event (audit and the DELETE_TOPIC log)."""
    return {
        "event_time": event.eventTime,
        "event_type": event.eventType,
        "broker_name": getattr(event, "brokerName", None),
        "topic": getattr(event, "topic", None),
        "cluster_name": getattr(event, "clusterName", None),
        "namespace": getattr(event, "namespace", None),
        "key": getattr(event, "key", None),
        "value": getattr(event, "value", None),
        "requested_by": getattr(event, "requestedBy", None),
        "source": arrival[0],
        "position": arrival[1],
        "event_date": event_date,
    }


def delete_from_row(row: dict[str, Any]) -> tuple[Arrival, DeleteTopicEvent]:
    """A logged DELETE_TOPIC back as (arrival, event)."""
    event = DeleteTopicEvent.model_construct(
        eventType="DELETE_TOPIC",
        eventTime=row["event_time"],
        topic=row["topic"],
        clusterName=row["cluster_name"],
        requestedBy=row["requested_by"],
    )
    return (row["source"], int(row["position"])), event


def may_hold(clock: GroupClock, topic: str, before: int) -> bool:
    """Can the group hold `topic` at time `before`: it holds it now, or a pending
    registration not later than that lists it (only a registration adds topics)."""
    if topic in clock.routes.topics.names():
        return True
    return any(
        isinstance(p.event, RegisterEvent)
        and p.event_time <= before
        and topic in topic_names(p.event.topicConfigTable)
        for p in clock.pending
    )


def merge_logged_deletes(
    clock: GroupClock, logged: Iterable[tuple[Arrival, DeleteTopicEvent]]
) -> int:
    """Add the logged DELETE_TOPIC events that this group may need and has not merged yet.

    Applied ones are older than the clock; merged ones wait in `pending` under the same
    arrival identity, so neither is added twice."""
    waiting = {p.arrival for p in clock.pending}
    added = 0
    for arrival, event in logged:
        if (
            event.eventTime > clock.watermark
            and arrival not in waiting
            and may_hold(clock, event.topic, event.eventTime)
        ):
            clock.add(event, arrival)
            waiting.add(arrival)
            added += 1
    return added


def topics_grew(before: TopicTable, after: TopicTable) -> bool:
    """A step that adds topics must run again at the next watermark move (module doc)."""
    if before is after:
        return False
    # C-level set operations: a fault of a 10 000-topic group loops over no topic in Python
    return not set(before.names()).issuperset(after.names())


def timeout_at(clock: GroupClock, watermark: int, grew: bool) -> int | None:
    """The smallest watermark at which the group's step must run again."""
    wake = clock.wake_up_at()
    if grew:
        wake = watermark + 1 if wake is None else min(wake, watermark + 1)
    return wake
