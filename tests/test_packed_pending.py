"""Events wait in state in their packed form and are decoded once, when applied.

The fast paths here (trusted construction, pydantic-core's JSON parser, packed pending events)
must give exactly what the plain paths give; the golden fixtures hold every event kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing_lib.core.clock import GroupClock, PendingEvent
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes
from routing_lib.core.wire import (
    _TYPES,
    RS,
    LazyTopicTable,
    loads,
    pack_event,
    packed_event_type,
    unpack_event,
)
from schemas import parse_event
from schemas.route_event import EventDataVersion, TickEvent

GOLDEN = Path(__file__).parent / "golden"


def golden_events(per_kind: int = 4) -> list:
    """Up to `per_kind` valid events of each type from each fixture."""
    events = []
    for path in sorted(GOLDEN.glob("*/events.jsonl")):
        taken: dict[str, int] = {}
        for line in path.read_text().splitlines():
            try:
                event = parse_event(line)
            except ValueError:
                continue  # fixtures hold invalid records too
            if isinstance(event, TickEvent) or taken.get(event.eventType, 0) >= per_kind:
                continue
            taken[event.eventType] = taken.get(event.eventType, 0) + 1
            events.append(event)
    return events


EVENTS = golden_events()


def test_the_fixtures_hold_every_event_kind():
    assert {e.eventType for e in EVENTS} == set(_TYPES)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: f"{e.eventType}@{e.eventTime}")
def test_unpacking_equals_model_construct(event):
    packed = pack_event(event)
    fast = unpack_event(packed)
    head_json, *topics = packed.split(RS)
    head = json.loads(head_json)
    if event.eventType == "REGISTER":  # what unpacking did before its fast path
        head["dataVersion"] = EventDataVersion.model_construct(**head["dataVersion"])
        head["topicConfigTable"] = LazyTopicTable(*topics)
    plain = type(event).model_construct(**head)
    assert type(fast) is type(event)
    assert packed_event_type(packed) == event.eventType
    assert fast.model_fields_set == plain.model_fields_set
    skip = {"topicConfigTable", "dataVersion"}
    assert {k: v for k, v in fast.__dict__.items() if k not in skip} == {
        k: v for k, v in plain.__dict__.items() if k not in skip
    }
    if event.eventType == "REGISTER":
        assert fast.dataVersion == event.dataVersion
        assert dict(fast.topicConfigTable) == {
            k: tuple(c.model_dump().values()) for k, c in event.topicConfigTable.items()
        }
    assert pack_event(fast) == packed


def test_loads_takes_what_the_fast_parser_refuses():
    text = json.dumps({"brokerName": "a\ud800b"})  # a lone surrogate, escaped by json.dumps
    assert loads(text) == {"brokerName": "a\ud800b"}


def _clock_with_pending() -> GroupClock:
    clock = GroupClock(GroupRoutes(EVENTS[0].brokerName))
    for n, event in enumerate(reversed(EVENTS[:40])):
        clock.add_packed(event.eventTime, ("f", n), pack_event(event))
    return clock


def test_parked_events_are_not_decoded_through_a_state_round_trip():
    clock = decode_clock(encode_clock(_clock_with_pending()))
    assert clock.pending and all(p._event is None for p in clock.pending)
    again = encode_clock(clock)
    assert again == encode_clock(_clock_with_pending())


def test_parked_events_apply_in_event_time_then_arrival_order():
    clock = decode_clock(encode_clock(_clock_with_pending()))
    due = clock.take_due(EVENTS[20].eventTime)
    assert [p.order_key() for p in due] == sorted(p.order_key() for p in due)
    assert all(p.event_time <= EVENTS[20].eventTime for p in due)
    assert all(p.event_time > EVENTS[20].eventTime for p in clock.pending)
    assert [p.event.eventTime for p in due] == [p.event_time for p in due]


def test_state_saved_before_event_times_were_stored_still_decodes():
    clock = _clock_with_pending()
    text, topics = encode_clock(clock)
    state = json.loads(text)
    state["pending"] = [entry[:3] for entry in state["pending"]]  # the previous layout
    old = decode_clock((json.dumps(state), topics))
    assert [p.order_key() for p in old.pending] == [p.order_key() for p in clock.pending]
    a, b = GroupClock(old.routes, old.pending), decode_clock((text, topics))
    last = max(e.eventTime for e in EVENTS)
    assert a.advance(last, DEFAULT_FLAGS).applied == b.advance(last, DEFAULT_FLAGS).applied


def test_pending_event_needs_a_form():
    with pytest.raises(ValueError):
        PendingEvent(1, ("f", 1))
