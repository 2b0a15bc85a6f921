"""GroupClock <-> JSON, the form a group's state takes between micro-batches."""

from __future__ import annotations

import json

from routing_lib.core.clock import GroupClock, PendingEvent
from routing_lib.core.group_routes import (
    BrokerData,
    BrokerLive,
    DataVersion,
    GroupRoutes,
    QueueData,
)
from routing_lib.core.wire import pack_event, unpack_event

STATE_FORMAT = 1


def encode_clock(clock: GroupClock) -> str:
    r = clock.routes
    data = r.broker_data
    return json.dumps({
        "v": STATE_FORMAT,
        "watermark": clock.watermark,
        "name": r.broker_name,
        "broker": None if data is None else [data.cluster, sorted(data.broker_addrs.items()),
                                             data.enable_acting_master, data.zone_name],
        "clusters": sorted(r.clusters),
        "topics": {t: [q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag]
                   for t, q in r.topics.items()},
        "live": [[c, a, x.last_update_timestamp, x.heartbeat_timeout_millis,
                  [x.data_version.state_version, x.data_version.timestamp,
                   x.data_version.counter], x.ha_server_addr] for (c, a), x in r.live.items()],
        "filters": [[c, a, servers] for (c, a), servers in r.filter_servers.items()],
        "pending": [[p.arrival[0], p.arrival[1], pack_event(p.event)] for p in clock.pending],
    }, separators=(",", ":"))


def decode_clock(text: str) -> GroupClock:
    s = json.loads(text)
    if s.get("v") != STATE_FORMAT:
        raise ValueError(f"unknown group state format {s.get('v')!r}")
    broker = s["broker"]
    routes = GroupRoutes(
        broker_name=s["name"],
        broker_data=None if broker is None else BrokerData(
            broker[0], {int(i): a for i, a in broker[1]}, broker[2], broker[3]),
        clusters=set(s["clusters"]),
        topics={t: QueueData(*q) for t, q in s["topics"].items()},
        live={(c, a): BrokerLive(last, timeout, DataVersion(*dv), ha)
              for c, a, last, timeout, dv, ha in s["live"]},
        filter_servers={(c, a): servers for c, a, servers in s["filters"]},
    )
    pending = []
    for source, position, text_event in s["pending"]:
        event = unpack_event(text_event)
        pending.append(PendingEvent(event.eventTime, (source, position), event))
    # The list was saved in heap order, so it is still a heap.
    return GroupClock(routes=routes, pending=pending, watermark=s["watermark"])
