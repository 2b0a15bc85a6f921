"""The streaming job's group logic without Spark: micro-batches, per-group steps that run only
when Spark would call them (rows, or a passed timeout), the published tables lagging one batch,
the admin log and the DELETE_TOPIC fan-out (routing_lib/core/admin.py)."""

from __future__ import annotations

import random
from collections import defaultdict

from routing_lib.core.admin import (
    ADMIN_KEY,
    group_key,
    merge_logged_deletes,
    timeout_at,
    topics_grew,
)
from routing_lib.core.clock import Arrival, GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.dump import canonical_dump, project
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes, RouteFlags
from routing_lib.core.replay import fleet_rows
from routing_lib.core.wire import Event, pack_event, unpack_event
from schemas import DeleteTopicEvent, TickEvent


class StreamModel:
    def __init__(self, delay_ms: int, round_trip: bool, flags: RouteFlags = DEFAULT_FLAGS):
        self.delay_ms, self.round_trip, self.flags = delay_ms, round_trip, flags
        self.clocks: dict[str, GroupClock] = {}
        self.timeouts: dict[str, int] = {}  # group -> the watermark that wakes it
        self.log: list[tuple[Arrival, DeleteTopicEvent]] = []
        self.max_seen = 0
        self.published = 0
        self.late = 0

    def holders(self, topic: str) -> list[str]:
        """Groups holding the topic in the published topicQueueTable."""
        return [k for k, c in self.clocks.items() if topic in c.routes.topics.names()]

    def batch(self, items: list[tuple[Event | TickEvent, Arrival]]) -> None:
        watermark = max(self.max_seen - self.delay_ms, 0)  # Spark's watermark lags one batch
        rows: dict[str, list[tuple[Event, Arrival, bool]]] = defaultdict(list)
        for event, arrival in items:
            self.max_seen = max(self.max_seen, event.eventTime)
            if isinstance(event, TickEvent):
                continue
            rows[group_key(event)].append((event, arrival, False))
            if isinstance(event, DeleteTopicEvent):
                for holder in self.holders(event.topic):
                    rows[holder].append((event, arrival, True))
        due = {k for k, wake in self.timeouts.items() if wake <= watermark}
        logged: list[tuple[Arrival, DeleteTopicEvent]] = []
        for key in sorted(rows.keys() | due):
            self._step(key, rows.get(key, []), watermark, logged)
        self.log += logged
        self.published = watermark

    def _step(self, key: str, rows: list, watermark: int, logged: list) -> None:
        self.timeouts.pop(key, None)
        if key == ADMIN_KEY:  # record in the admin log, as the job's foreachBatch does
            for event, arrival, _ in rows:
                if event.eventTime <= self.published:
                    self.late += 1
                else:
                    logged.append((arrival, event))
            return
        clock = self.clocks.get(key) or GroupClock(GroupRoutes(key))
        before = clock.routes.topics
        merge_logged_deletes(clock, [e for e in self.log if e[1].eventTime > self.published])
        for event, arrival, fanned_out in rows:
            if clock.is_late(event.eventTime, self.published):
                self.late += not fanned_out
            else:
                clock.add(unpack_event(pack_event(event)) if self.round_trip else event, arrival)
        clock.advance(watermark, self.flags)
        if clock.is_idle():
            self.clocks.pop(key, None)
            return
        if self.round_trip:
            clock = decode_clock(encode_clock(clock))
        self.clocks[key] = clock
        wake = timeout_at(clock, watermark, topics_grew(before, clock.routes.topics))
        if wake is not None:
            self.timeouts[key] = wake

    def finish(self, final: int) -> None:
        """No-data batches until the watermark reaches `final` (Spark's last batches)."""
        self.max_seen = max(self.max_seen, final + self.delay_ms)
        self.batch([])
        self.batch([])

    def dump(self) -> dict:
        groups = (c.routes for c in self.clocks.values())
        return project(canonical_dump(fleet_rows(groups), self.published))


def run_model_in_batches(
    events: list[Event | TickEvent],
    rng: random.Random,
    delay_ms: int,
    round_trip: bool,
    max_batch: int = 40,
) -> StreamModel:
    model = StreamModel(delay_ms, round_trip)
    i = 0
    while i < len(events):
        size = rng.randint(1, max_batch)
        model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
        i += size
    model.finish(max(e.eventTime for e in events) - delay_ms)
    return model
