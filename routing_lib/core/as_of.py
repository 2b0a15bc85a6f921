"""Route tables as at an event time T, rebuilt from the history tables alone.

A history interval row is in State(T) iff `valid_from <= T and (valid_to is None or
T < valid_to)` (history.py explains why this boundary equals contract §3's State(T): events
with eventTime <= T, expiries with deadline < T). A broker is in brokerLiveTable at T iff its
latest liveness event with event_time <= T, by (event_time, seq), is REGISTERED.

Only valid for T up to the watermark the history was written at: later expiries are unknown.
brokerAddrTable's enableActingMaster/zoneName are not versioned, so they are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from routing_lib.core.catalog import BROKER_ADDR, CLUSTER_ADDR, TOPIC_QUEUE
from routing_lib.core.dump import canonical_dump, project
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    CLUSTER_MEMBERSHIP_HISTORY,
    REGISTERED,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.tables import Row

AS_OF_KEYS = ("watermark", "brokerAddrTable", "clusterAddrTable", "topicQueueTable", "liveBrokers")
_UNVERSIONED = ("enableActingMaster", "zoneName")


def valid_at(row: Row, t: int) -> bool:
    valid_to = row.get("valid_to")
    return row["valid_from"] <= t and (valid_to is None or t < valid_to)


def route_rows_as_of(
    history: Mapping[str, Iterable[Row]], t: int, topic_queue: list[Row] | None = None
) -> dict[str, list[Row]]:
    """topic_queue_table, broker_addr_table and cluster_addr_table rows of State(t).
    `topic_queue`: State(t)'s topic_queue_table rows when the caller has them without the
    topic_route_history rows (read/route_history.py's as-of path: the base rows and overlays
    valid at t)."""
    topics = (
        topic_queue
        if topic_queue is not None
        else [
            {
                "topic": r["topic"],
                "broker_name": r["broker_name"],
                "read_queue_nums": r["read_queue_nums"],
                "write_queue_nums": r["write_queue_nums"],
                "perm": r["perm"],
                "topic_sys_flag": r["topic_sys_flag"],
            }
            for r in history.get(TOPIC_ROUTE_HISTORY, ())
            if valid_at(r, t)
        ]
    )
    brokers = [
        {
            "broker_name": r["broker_name"],
            "broker_id": r["broker_id"],
            "broker_addr": r["broker_addr"],
            "cluster": r["cluster"],
        }
        for r in history.get(BROKER_MEMBERSHIP_HISTORY, ())
        if valid_at(r, t)
    ]
    clusters = [
        {"cluster_name": r["cluster_name"], "broker_name": r["broker_name"]}
        for r in history.get(CLUSTER_MEMBERSHIP_HISTORY, ())
        if valid_at(r, t)
    ]
    return {TOPIC_QUEUE: topics, BROKER_ADDR: brokers, CLUSTER_ADDR: clusters}


def live_brokers_as_of(events: Iterable[Row], t: int) -> list[dict[str, str]]:
    """brokerLiveTable's (clusterName, brokerAddr) at t, sorted like the canonical dump."""
    latest: dict[tuple[str, str, str], tuple[int, int, str]] = {}
    for e in events:
        if e["event_time"] > t:
            continue
        broker = (e["broker_name"], e["cluster_name"], e["broker_addr"])
        order = (e["event_time"], e["seq"], e["event_type"])
        if broker not in latest or order[:2] > latest[broker][:2]:
            latest[broker] = order
    # a set: one address live under two brokerNames is one entry (core/broker_rows.py)
    live = {
        (cluster, addr) for (_, cluster, addr), (_, _, kind) in latest.items() if kind == REGISTERED
    }
    return [{"clusterName": c, "brokerAddr": a} for c, a in sorted(live)]


def as_of(
    history: Mapping[str, Iterable[Row]], t: int, topic_queue: list[Row] | None = None
) -> dict[str, Any]:
    """The canonical dump's brokerAddrTable, clusterAddrTable and topicQueueTable of State(t),
    plus `liveBrokers`; `watermark` is t. `topic_queue`: as for route_rows_as_of."""
    dump = canonical_dump(route_rows_as_of(history, t, topic_queue), t)
    out: dict[str, Any] = {k: dump[k] for k in AS_OF_KEYS if k in dump}
    for entry in out["brokerAddrTable"].values():
        for key in _UNVERSIONED:
            entry.pop(key, None)
    out["liveBrokers"] = live_brokers_as_of(history.get(BROKER_LIVENESS_EVENTS, ()), t)
    return out


def as_of_view(dump: Mapping[str, Any]) -> dict[str, Any]:
    """A full canonical dump (e.g. replay_dump(events, T)) in as_of's shape, to compare."""
    projected = project(dump)
    out = {k: projected[k] for k in AS_OF_KEYS if k in projected}
    out["liveBrokers"] = [
        {"clusterName": r["clusterName"], "brokerAddr": r["brokerAddr"]}
        for r in projected["brokerLiveTable"]
    ]
    return out
