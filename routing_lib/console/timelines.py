"""Timelines from the history tables: a topic's route versions and a broker's liveness."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from routing_lib.core.history import REGISTERED
from routing_lib.core.tables import Row

JsonObj = dict[str, Any]


ROUTE_VERSION = {  # JSON key -> topic_route_history column
    "brokerName": "broker_name",
    "from": "valid_from",
    "to": "valid_to",  # None: still current at the watermark
    "perm": "perm",
    "readQueueNums": "read_queue_nums",
    "writeQueueNums": "write_queue_nums",
    "topicSysFlag": "topic_sys_flag",
    "startedBy": "started_by",
    "endedBy": "ended_by",
}
MEMBERSHIP = {  # JSON key -> broker_membership_history column
    "cluster": "cluster",
    "addr": "broker_addr",
    "brokerId": "broker_id",
    "from": "valid_from",
    "to": "valid_to",
    "startReason": "start_reason",
    "endReason": "end_reason",
}


def _intervals(rows: Iterable[Row], columns: dict[str, str], by: str) -> list[JsonObj]:
    """History rows as JSON objects (`columns`: key -> column; a column an older table
    lacks reads as None), ordered by `by`, then start."""
    out = [{key: r.get(column) for key, column in columns.items()} for r in rows]
    return sorted(out, key=lambda v: (v[by], v["from"]))


def route_versions(rows: Iterable[Row]) -> list[JsonObj]:
    """topic_route_history rows of one topic: which broker group carried it, when, how."""
    return _intervals(rows, ROUTE_VERSION, "brokerName")


def liveness_intervals(events: Iterable[Row]) -> list[JsonObj]:
    """Alive intervals per (cluster, address) from broker_liveness_events: a REGISTERED
    event opens one, the next UNREGISTERED / EXPIRED / REJECTED / CHANNEL_CLOSED closes it
    (that event's type is the interval's end); `to` None: alive at the watermark."""
    intervals: list[JsonObj] = []
    open_: dict[tuple[str, str], JsonObj] = {}
    for e in sorted(events, key=lambda r: (r["event_time"], r["seq"])):
        key = (e["cluster_name"], e["broker_addr"])
        if e["event_type"] == REGISTERED:
            if key not in open_:
                open_[key] = {
                    "cluster": key[0],
                    "addr": key[1],
                    "brokerId": e.get("broker_id"),
                    "from": e["event_time"],
                    "to": None,
                    "end": None,
                }
                intervals.append(open_[key])
        elif key in open_:
            interval = open_.pop(key)
            interval["to"], interval["end"] = e["event_time"], e["event_type"]
    return sorted(intervals, key=lambda i: (i["cluster"], i["addr"], i["from"]))


def membership(rows: Iterable[Row]) -> list[JsonObj]:
    """broker_membership_history rows of one group: which address held which broker id."""
    return _intervals(rows, MEMBERSHIP, "addr")


def buckets(times: Iterable[int], start: int, end: int, count: int = 48) -> list[JsonObj]:
    """How many of `times` fall in each of `count` equal slices of [start, end]."""
    width = max(1, -(-(end - start + 1) // count))
    slots = [0] * count
    for t in times:
        if start <= t <= end:
            slots[min(count - 1, (t - start) // width)] += 1
    return [
        {"from": start + i * width, "to": start + (i + 1) * width, "n": n}
        for i, n in enumerate(slots)
    ]
