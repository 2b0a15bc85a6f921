"""Reference replay: State(T) of contract §3 by the plain sequential loop.

No pending queues, no watermarks, no batches: sort, expire, apply. The streaming path is
tested against this.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

from routing_lib.core.admin import group_key
from routing_lib.core.dump import canonical_dump
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes, RouteFlags, apply_event
from routing_lib.core.tables import ROUTE_TABLES, Row, rows_of
from routing_lib.core.wire import Event
from schemas.route_event import DeleteTopicEvent, TickEvent


def replay(
    events: Iterable[Event | TickEvent], until: int, flags: RouteFlags = DEFAULT_FLAGS
) -> dict[str, GroupRoutes]:
    """Every event with eventTime <= until, in (eventTime, arrival) order."""
    groups: dict[str, GroupRoutes] = {}
    for event_time, event in _ordered(events, until):
        _apply(groups, event_time, event, flags)
    for routes in groups.values():
        routes.expire(until)
    return groups


def replay_states(
    events: Iterable[Event | TickEvent], times: Iterable[int], flags: RouteFlags = DEFAULT_FLAGS
) -> Iterator[tuple[int, dict[str, GroupRoutes]]]:
    """(t, replay(events, t)) for each t of times, ascending, in one pass: the events up to t
    are a prefix of the ordered events, so each state is a copy of the running one, expired at
    t (tests compare many instants of one history; replaying it whole for each was slow)."""
    wanted = sorted(set(times))
    if not wanted:
        return
    ordered = _ordered(events, wanted[-1])
    groups: dict[str, GroupRoutes] = {}
    applied = 0
    for until in wanted:
        while applied < len(ordered) and ordered[applied][0] <= until:
            _apply(groups, *ordered[applied], flags)
            applied += 1
        state = copy.deepcopy(groups)
        for routes in state.values():
            routes.expire(until)
        yield until, state


def _ordered(events: Iterable[Event | TickEvent], until: int) -> list[tuple[int, Event]]:
    # A TICK changes no table; expiry is monotone, so the final expire(until) covers its time.
    ordered = sorted(
        (
            (e.eventTime, i, e)
            for i, e in enumerate(events)
            if e.eventTime <= until and not isinstance(e, TickEvent)
        ),
        key=lambda item: item[:2],
    )
    return [(event_time, event) for event_time, _, event in ordered]


def _apply(
    groups: dict[str, GroupRoutes], event_time: int, event: Event, flags: RouteFlags
) -> None:
    for routes in groups.values():
        routes.expire(event_time)
    if isinstance(event, DeleteTopicEvent):  # every group decides by its own clusters
        for routes in groups.values():
            apply_event(routes, event, flags)
        return
    key = group_key(event)
    routes = groups.setdefault(key, GroupRoutes(key))
    apply_event(routes, event, flags)


def fleet_rows(groups: Iterable[GroupRoutes]) -> dict[str, list[Row]]:
    tables: dict[str, list[Row]] = {t: [] for t in ROUTE_TABLES}
    for routes in groups:
        for table, rows in rows_of(routes).items():
            tables[table].extend(rows)
    return tables


def replay_dump(
    events: list[Event | TickEvent], until: int, flags: RouteFlags = DEFAULT_FLAGS
) -> dict[str, Any]:
    return canonical_dump(fleet_rows(replay(events, until, flags).values()), until)


def default_watermark(events: list[Event | TickEvent], watermark_delay_ms: int) -> int:
    """The watermark a job reaches after seeing these events: max eventTime - delay."""
    return max(e.eventTime for e in events) - watermark_delay_ms


def replay_dumps(
    events: list[Event | TickEvent], times: Iterable[int], flags: RouteFlags = DEFAULT_FLAGS
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(t, replay_dump(events, t)) for each t of times, ascending, by replay_states."""
    for until, groups in replay_states(events, times, flags):
        yield until, canonical_dump(fleet_rows(groups.values()), until)
