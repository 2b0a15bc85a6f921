"""GroupClock <-> (JSON, topics blob), the form a group's state takes between micro-batches.

The topics travel as their own blob (routing_lib.core.topic_table), decoded only when used and
handed back unchanged when they did not change: a heartbeat costs O(brokers), not O(topics).
"""

from __future__ import annotations

import json

from routing_lib.core.clock import GroupClock, PendingEvent
from routing_lib.core.group_routes import (
    BrokerData,
    BrokerLive,
    DataVersion,
    GroupRoutes,
)
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import loads, unpack_event

STATE_FORMAT = 2
ClockState = tuple[str, str]  # (clock JSON, topics blob)


def encode_clock(clock: GroupClock) -> ClockState:
    r = clock.routes
    data = r.broker_data
    return json.dumps(
        {
            "v": STATE_FORMAT,
            "watermark": clock.watermark,
            "name": r.broker_name,
            "broker": None
            if data is None
            else [
                data.cluster,
                sorted(data.broker_addrs.items()),
                data.enable_acting_master,
                data.zone_name,
            ],
            "clusters": sorted(r.clusters),
            "live": [
                [
                    c,
                    a,
                    x.last_update_timestamp,
                    x.heartbeat_timeout_millis,
                    [
                        x.data_version.state_version,
                        x.data_version.timestamp,
                        x.data_version.counter,
                    ],
                    x.ha_server_addr,
                ]
                for (c, a), x in r.live.items()
            ],
            "filters": [[c, a, servers] for (c, a), servers in r.filter_servers.items()],
            "pending": [
                [p.arrival[0], p.arrival[1], p.packed, p.event_time] for p in clock.pending
            ],
            **({"kv": r.kv} if r.kv else {}),
            # optional like "kv": a state saved before connections were tracked loads with
            # none (every broker's set empty), and a group without any stores nothing
            **(
                {"channels": [[c, a, list(held)] for (c, a), held in r.channels.items()]}
                if r.channels
                else {}
            ),
        },
        separators=(",", ":"),
    ), r.topics.blob()


def decode_clock(state: ClockState) -> GroupClock:
    text, topics_blob = state
    s = loads(text)
    if s.get("v") != STATE_FORMAT:
        raise ValueError(f"unknown group state format {s.get('v')!r}")
    broker = s["broker"]
    routes = GroupRoutes(
        broker_name=s["name"],
        broker_data=None
        if broker is None
        else BrokerData(broker[0], {int(i): a for i, a in broker[1]}, broker[2], broker[3]),
        clusters=set(s["clusters"]),
        topics=TopicTable.from_blob(topics_blob),
        live={
            (c, a): BrokerLive(last, timeout, DataVersion(*dv), ha)
            for c, a, last, timeout, dv, ha in s["live"]
        },
        filter_servers={(c, a): servers for c, a, servers in s["filters"]},
        kv=s.get("kv", {}),
        channels={(c, a): tuple(held) for c, a, held in s.get("channels", ())},
    )
    pending = []
    for source, position, packed, *event_time in s["pending"]:
        if not event_time:  # saved before the event time was stored beside the event
            event_time = [unpack_event(packed).eventTime]
        pending.append(PendingEvent(event_time[0], (source, position), packed=packed))
    # The list was saved in heap order, so it is still a heap.
    return GroupClock(routes=routes, pending=pending, watermark=s["watermark"])
