"""The event-time clock of one broker group (contract §3).

Events wait in `pending` until the watermark passes them; `advance(W)` then applies them in
(eventTime, arrival) order, expiring brokers before each one and at W itself. The group's
tables therefore equal State(W) however the events were split into micro-batches.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from routing_lib.core.group_routes import BrokerKey, Event, GroupRoutes, RouteFlags, apply_event

Arrival = tuple[str, int]  # (source, position): Kafka topic-partition and offset, or file and line


@dataclass(order=True, frozen=True)
class PendingEvent:
    event_time: int
    arrival: Arrival
    event: Event = field(compare=False)


@dataclass(frozen=True)
class Expiry:
    broker: BrokerKey
    deadline: int
    at: int  # the clock reading that found it expired


@dataclass
class Advance:
    """What one move of the clock did, in order."""

    applied: list[PendingEvent] = field(default_factory=list)
    expiries: list[Expiry] = field(default_factory=list)
    # Events whose application raised (a bug, not bad input: validation rejects that), with
    # the exception text. The caller dead-letters them; the clock goes on with the rest.
    failed: list[tuple[PendingEvent, str]] = field(default_factory=list)


def apply_guarded(
    routes: GroupRoutes, item: PendingEvent, flags: RouteFlags, advance: Advance
) -> bool:
    """apply_event as a last line of defence: one event that raises cannot stop its group."""
    try:
        apply_event(routes, item.event, flags)
    except Exception as exc:
        advance.failed.append((item, f"internal error: {type(exc).__name__}: {str(exc)[:500]}"))
        return False
    advance.applied.append(item)
    return True


@dataclass
class GroupClock:
    routes: GroupRoutes
    pending: list[PendingEvent] = field(default_factory=list)  # a heap
    watermark: int = 0  # routes == State(watermark) restricted to this group

    def is_late(self, event_time: int, published_watermark: int) -> bool:
        """Late: the published tables already show a state this event belongs to."""
        return event_time <= max(published_watermark, self.watermark)

    def add(self, event: Event, arrival: Arrival) -> None:
        heapq.heappush(self.pending, PendingEvent(event.eventTime, arrival, event))

    def advance(self, watermark: int, flags: RouteFlags) -> Advance:
        """Move the group's clock forward to `watermark` (never backwards)."""
        result = Advance()
        if watermark <= self.watermark:
            return result
        while self.pending and self.pending[0].event_time <= watermark:
            item = heapq.heappop(self.pending)
            result.expiries += self._expire(item.event_time)
            apply_guarded(self.routes, item, flags, result)
        result.expiries += self._expire(watermark)
        self.watermark = watermark
        return result

    def _expire(self, now: int) -> list[Expiry]:
        return [Expiry(key, deadline, now) for key, deadline in self.routes.expire(now)]

    def wake_up_at(self) -> int | None:
        """The smallest watermark at which `advance` would change something."""
        candidates = []
        if self.pending:
            candidates.append(self.pending[0].event_time)
        deadline = self.routes.next_deadline()
        if deadline is not None:
            candidates.append(deadline + 1)
        return min(candidates, default=None)

    def is_idle(self) -> bool:
        return not self.pending and self.routes.is_empty()
