"""The pure core against every golden fixture, by the reference replay and by the clock."""

from __future__ import annotations

import random

import pytest

from routing_lib.core.clock import GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.dump import canonical_dump, project
from routing_lib.core.group_routes import GroupRoutes, RouteFlags
from routing_lib.core.replay import default_watermark, fleet_rows
from routing_lib.core.wire import pack_event, unpack_event
from schemas import TickEvent, parse_event
from tests.helpers import DELAY_MS, FIXTURES, expected_dump, fixture_lines, reference_dump


@pytest.mark.parametrize("name", FIXTURES)
def test_reference_replay_matches_expected(name):
    assert reference_dump(fixture_lines(name)) == expected_dump(name)


def run_clocks_in_batches(lines: list[str], rng: random.Random, round_trip: bool) -> dict:
    """Feed events in arrival order, cut into random micro-batches, like the Spark step does:
    each batch adds its events, then every group moves to the batch's watermark.
    With round_trip, events travel packed and clocks are saved and restored between batches."""
    events = [parse_event(line) for line in lines]
    if round_trip:
        events = [e if isinstance(e, TickEvent) else unpack_event(pack_event(e)) for e in events]
    clocks: dict[str, GroupClock] = {}
    max_seen, published, i = 0, 0, 0
    while i < len(events):
        batch = events[i:i + rng.randint(1, 40)]
        watermark = max(max_seen - DELAY_MS, 0)  # Spark's watermark lags one batch
        for position, event in enumerate(batch, start=i):
            if isinstance(event, TickEvent):  # moves the watermark (max_seen) only
                continue
            clock = clocks.setdefault(event.brokerName, GroupClock(GroupRoutes(event.brokerName)))
            assert not clock.is_late(event.eventTime, published)
            clock.add(event, ("file", position))
        for name, clock in clocks.items():
            clock.advance(watermark, RouteFlags())
            if round_trip:
                clocks[name] = decode_clock(encode_clock(clock))
        i += len(batch)
        max_seen = max([max_seen] + [e.eventTime for e in batch])
        published = watermark
    final = default_watermark(events, DELAY_MS)
    for clock in clocks.values():
        clock.advance(final, RouteFlags())
    return project(canonical_dump(fleet_rows(c.routes for c in clocks.values()), final))


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_clock_in_random_batches_matches_expected(name, seed):
    rng = random.Random(seed)
    result = run_clocks_in_batches(fixture_lines(name), rng, round_trip=seed != 3)
    assert result == expected_dump(name)


def test_late_event_is_detected_against_published_watermark():
    line = fixture_lines("01_master_registers")[0]
    event = parse_event(line)
    clock = GroupClock(GroupRoutes(event.brokerName))
    assert clock.is_late(event.eventTime, published_watermark=event.eventTime)
    assert not clock.is_late(event.eventTime, published_watermark=event.eventTime - 1)
    clock.advance(event.eventTime + 5, RouteFlags())
    assert clock.is_late(event.eventTime, published_watermark=0)


def test_wake_up_is_next_pending_event_or_first_expiry():
    lines = fixture_lines("05_expiry_custom_timeout")
    event = parse_event(lines[0])
    clock = GroupClock(GroupRoutes(event.brokerName))
    clock.add(event, ("f", 1))
    assert clock.wake_up_at() == event.eventTime
    clock.advance(event.eventTime, RouteFlags())
    live = next(iter(clock.routes.live.values()))
    assert clock.wake_up_at() == live.last_update_timestamp + live.heartbeat_timeout_millis + 1
