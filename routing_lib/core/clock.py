"""The event-time clock of one broker group (contract §3).

Events wait in `pending` until the watermark passes them; `advance(W)` then applies them in
(eventTime, arrival) order, expiring brokers before each one and at W itself. The group's
tables therefore equal State(W) however the events were split into micro-batches. `steps(W)`
is the same move one change at a time, for the history tables (routing_lib/core/history.py).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter

from routing_lib.core.content import CONTENT_FAILURES
from routing_lib.core.group_routes import BrokerKey, GroupRoutes, RouteFlags, apply_event
from routing_lib.core.rows import internal_error_reason
from routing_lib.core.wire import Event, pack_event, unpack_event

Arrival = tuple[str, int]  # (source, position): Kafka topic-partition and offset, or file and line


class PendingEvent:
    """An event waiting for the watermark, ordered by (event_time, arrival).

    It may be held in its packed form (routing_lib.core.wire) and is decoded only when
    something reads `event`: most events wait in state for a micro-batch or more, and packing
    and unpacking each one at every state round trip was a fifth of a backfill's Python time.
    """

    __slots__ = ("event_time", "arrival", "_event", "_packed")

    def __init__(
        self,
        event_time: int,
        arrival: Arrival,
        event: Event | None = None,
        packed: str | None = None,
    ):
        if event is None and packed is None:
            raise ValueError("a pending event needs the event or its packed form")
        self.event_time, self.arrival = event_time, arrival
        self._event, self._packed = event, packed

    @property
    def event(self) -> Event:
        if self._event is None:
            self._event = unpack_event(self._packed)  # type: ignore[arg-type]  # one form is set
        return self._event

    @property
    def packed(self) -> str:
        if self._packed is None:
            self._packed = pack_event(self._event)  # type: ignore[arg-type]  # one form is set
        return self._packed

    def order_key(self) -> tuple[int, Arrival]:
        return (self.event_time, self.arrival)

    def __lt__(self, other: PendingEvent) -> bool:
        return self.order_key() < other.order_key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PendingEvent) and self.order_key() == other.order_key()

    def __hash__(self) -> int:
        return hash(self.order_key())

    def __repr__(self) -> str:
        return f"PendingEvent({self.event_time}, {self.arrival})"


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


@dataclass(frozen=True)
class ClockStep:
    """One change of a clock move: an event applied (or one whose application raised), or
    the expiry of the brokers sharing one deadline."""

    time: int  # the event's eventTime; an expiry's deadline + 1, the first T it shows in
    item: PendingEvent | None = None  # the event; None for an expiry
    applied: bool = True  # False: applying the event raised (Advance.failed holds it)
    expired: tuple[tuple[BrokerKey, int], ...] = ()  # an expiry's (broker, deadline), in order
    detected_at: int | None = None  # an expiry's clock reading (batch-dependent: not stored)


def apply_guarded(
    routes: GroupRoutes, item: PendingEvent, flags: RouteFlags, advance: Advance
) -> bool:
    """apply_event as a last line of defence: one event that raises cannot stop its group.

    Content that cannot be read (a pending registration's topic table decoded here) is not
    the event's fault: that error propagates, the task fails and is retried, and the event is
    never dead-lettered for it."""
    try:
        apply_event(routes, item.event, flags)
    except CONTENT_FAILURES:
        raise
    except Exception as exc:
        advance.failed.append((item, internal_error_reason(exc)))
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

    def add_packed(self, event_time: int, arrival: Arrival, packed: str) -> None:
        """Add a validated event in its packed form, decoded only when applied."""
        heapq.heappush(self.pending, PendingEvent(event_time, arrival, packed=packed))

    def advance(self, watermark: int, flags: RouteFlags) -> Advance:
        """Move the group's clock forward to `watermark` (never backwards)."""
        result = Advance()
        for _ in self.steps(watermark, flags, result):
            pass
        return result

    def steps(self, watermark: int, flags: RouteFlags, result: Advance) -> Iterator[ClockStep]:
        """`advance`, yielding after each change; `result` gets what `advance` returns. The
        clock's watermark moves once the last step is taken: consume it to the end."""
        if watermark <= self.watermark:
            return
        for item in self.take_due(watermark):
            yield from self._expire(item.event_time, result)
            applied = apply_guarded(self.routes, item, flags, result)
            yield ClockStep(item.event_time, item, applied)
        yield from self._expire(watermark, result)
        self.watermark = watermark

    def take_due(self, watermark: int) -> list[PendingEvent]:
        """Remove and return the pending events at or before `watermark`, in order.

        One sort (keyed: tuple compares in C) instead of a heap pop per event; a sorted list
        is still a heap, so `add` keeps working on what is left."""
        pending = self.pending
        if not pending or pending[0].event_time > watermark:
            return []
        pending.sort(key=PendingEvent.order_key)
        cut = bisect.bisect_right(pending, watermark, key=attrgetter("event_time"))
        due = pending[:cut]
        del pending[:cut]
        return due

    def _expire(self, now: int, result: Advance) -> Iterator[ClockStep]:
        """Expire the brokers whose deadline is before `now`, one deadline at a time: each
        expiry is a step of its own, stamped deadline + 1 (GroupRoutes.expire takes brokers in
        (deadline, key) order, so this leaves the tables as one expire(now) would)."""
        while (deadline := self.routes.next_deadline()) is not None and deadline < now:
            expired = self.routes.expire(deadline + 1)
            result.expiries += [Expiry(key, d, now) for key, d in expired]
            yield ClockStep(deadline + 1, expired=tuple(expired), detected_at=now)

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
        return not self.pending and self.routes.keeps_nothing()
