"""The pure core against every golden fixture, by the reference replay and by the clock."""

from __future__ import annotations

import random

import pytest

from routing_lib.core.clock import GroupClock
from routing_lib.core.group_routes import GroupRoutes, RouteFlags
from routing_lib.core.replay import default_watermark
from schemas import parse_event
from tests.support.helpers import (
    DELAY_MS,
    FIXTURES,
    expected_dump,
    fixture_lines,
    reference_dump,
    seeds,
)
from tests.support.stream_model import run_model_in_batches


@pytest.mark.parametrize("name", FIXTURES)
def test_reference_replay_matches_expected(name):
    assert reference_dump(fixture_lines(name)) == expected_dump(name)


def run_clocks_in_batches(lines: list[str], rng: random.Random, content_refs: bool) -> dict:
    """Feed events in arrival order, cut into random micro-batches, like the Spark step does
    (tests/support/stream_model.py: a group runs only on rows or a passed timeout; admin events go
    through the admin log and the DELETE_TOPIC fan-out). The shipped step runs every call,
    saving and restoring the state between batches; with content_refs, topic tables and large
    state values travel as content references."""
    events = [parse_event(line) for line in lines]
    model = run_model_in_batches(events, rng, DELAY_MS, content_refs)
    assert model.late == 0
    assert model.published == default_watermark(events, DELAY_MS)
    return model.dump()


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", seeds([3, 1, 2]))  # 3: without content references
def test_clock_in_random_batches_matches_expected(name, seed):
    rng = random.Random(seed)
    result = run_clocks_in_batches(fixture_lines(name), rng, content_refs=seed != 3)
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
