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
from routing_lib.core.overlay import GroupTopics, Overlay, PermOp
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import loads, unpack_event

STATE_FORMAT = 2
# A group whose overlay is not trivial (core/overlay.py) is saved as format 3: the topics blob
# is its base and the JSON has an "overlay". A trivial overlay is saved exactly as before, so
# checkpoints of either version read the same; code without overlays stops on format 3
# rather than taking a base for the group's topics.
OVERLAY_STATE_FORMAT = 3
ClockState = tuple[str, str]  # (clock JSON, topics blob: the base)


def encode_clock(clock: GroupClock) -> ClockState:
    r = clock.routes
    data = r.broker_data
    overlay = r.topic_state.overlay
    return json.dumps(
        {
            "v": STATE_FORMAT if overlay.is_trivial() else OVERLAY_STATE_FORMAT,
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
            **({} if overlay.is_trivial() else {"overlay": encode_overlay(overlay)}),
        },
        separators=(",", ":"),
    ), r.topic_state.base.blob()


def encode_overlay(overlay: Overlay) -> list[object]:
    covered = None if overlay.covered is None else sorted(overlay.covered)
    return [overlay.present, overlay.perm_op.value, covered]


def decode_overlay(value: list[object] | None) -> Overlay:
    if value is None:
        return Overlay()
    present, op, covered = value
    return Overlay(
        bool(present),
        PermOp(op),
        None if covered is None else frozenset(covered),  # type: ignore[call-overload]
    )


def decode_clock(state: ClockState) -> GroupClock:
    text, topics_blob = state
    s = loads(text)
    if s.get("v") not in (STATE_FORMAT, OVERLAY_STATE_FORMAT):
        raise ValueError(f"unknown group state format {s.get('v')!r}")
    broker = s["broker"]
    routes = GroupRoutes(
        broker_name=s["name"],
        broker_data=None
        if broker is None
        else BrokerData(broker[0], {int(i): a for i, a in broker[1]}, broker[2], broker[3]),
        clusters=set(s["clusters"]),
        topic_state=GroupTopics(
            TopicTable.from_blob(topics_blob), decode_overlay(s.get("overlay"))
        ),
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
