"""Reference replay: State(T) of contract §3 by the plain sequential loop.

No pending queues, no watermarks, no batches: sort, expire, apply. The streaming path is
tested against this.
"""

from __future__ import annotations

from collections.abc import Iterable

from routing_lib.core.admin import group_key
from routing_lib.core.dump import canonical_dump
from routing_lib.core.group_routes import DEFAULT_FLAGS, Event, GroupRoutes, RouteFlags, apply_event
from routing_lib.core.tables import ROUTE_TABLES, Row, rows_of
from schemas.route_event import DeleteTopicEvent, TickEvent


def replay(
    events: Iterable[Event | TickEvent], until: int, flags: RouteFlags = DEFAULT_FLAGS
) -> dict[str, GroupRoutes]:
    """Every event with eventTime <= until, in (eventTime, arrival) order."""
    # A TICK changes no table; expiry is monotone, so the final expire(until) covers its time.
    ordered = sorted(
        (
            (e.eventTime, i, e)
            for i, e in enumerate(events)
            if e.eventTime <= until and not isinstance(e, TickEvent)
        ),
        key=lambda item: item[:2],
    )
    groups: dict[str, GroupRoutes] = {}
    for event_time, _, event in ordered:
        for routes in groups.values():
            routes.expire(event_time)
        if isinstance(event, DeleteTopicEvent):  # every group decides by its own clusters
            for routes in groups.values():
                apply_event(routes, event, flags)
            continue
        key = group_key(event)
        routes = groups.setdefault(key, GroupRoutes(key))
        apply_event(routes, event, flags)
    for routes in groups.values():
        routes.expire(until)
    return groups


def fleet_rows(groups: Iterable[GroupRoutes]) -> dict[str, list[Row]]:
    tables: dict[str, list[Row]] = {t: [] for t in ROUTE_TABLES}
    for routes in groups:
        for table, rows in rows_of(routes).items():
            tables[table].extend(rows)
    return tables


def replay_dump(
    events: list[Event | TickEvent], until: int, flags: RouteFlags = DEFAULT_FLAGS
) -> dict:
    return canonical_dump(fleet_rows(replay(events, until, flags).values()), until)


def default_watermark(events: list[Event | TickEvent], watermark_delay_ms: int) -> int:
    """The watermark a job reaches after seeing these events: max eventTime - delay."""
    return max(e.eventTime for e in events) - watermark_delay_ms
