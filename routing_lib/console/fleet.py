"""The fleet view's data: clusters -> broker groups -> brokers, from a RouteIndex (the live
tables, or State(T) rebuilt from the history) plus what is known of each broker's liveness."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from routing_lib.core.group_routes import MASTER_ID
from routing_lib.core.history import REGISTERED
from routing_lib.core.tables import Row
from routing_lib.lookup.route_topics import DeltaWriteCounts, GroupCounts, RouteTopics
from routing_lib.lookup.routes import RouteIndex

BrokerKey = tuple[str, str]  # (cluster name, broker address), brokerLiveTable's key
JsonObj = dict[str, Any]


def alive_since(events: Iterable[Row], at: int) -> dict[BrokerKey, int]:
    """When each broker live at `at` entered brokerLiveTable: its latest liveness event with
    event_time <= at, by (event_time, seq), is a REGISTERED one at that time. Each brokerName
    group logs its own events (seq counts within a group), so they are followed per group; an
    address live under two brokerNames (renamed in place) is live since the earlier."""
    latest: dict[tuple[str, str, str], tuple[int, int, str]] = {}
    for e in events:
        if e["event_time"] > at:
            continue
        key = (e["cluster_name"], e["broker_addr"], e["broker_name"])
        order = (e["event_time"], e["seq"], e["event_type"])
        if key not in latest or order[:2] > latest[key][:2]:
            latest[key] = order
    since: dict[BrokerKey, int] = {}
    for (cluster, addr, _), (t, _, kind) in latest.items():
        if kind == REGISTERED:
            since[cluster, addr] = min(t, since.get((cluster, addr), t))
    return since


class WriteCountable(Protocol):
    def group_write_counts(self) -> dict[str, tuple[int, int]]: ...


def write_counts(store: WriteCountable) -> dict[str, tuple[int, int]]:
    """broker group -> (topics it has queues of, of which writable), as broker_topic_counts
    reads them: counted by the lookup's topic store (vectorised over the base index's holders
    and the group overlays, issue 36)."""
    return store.group_write_counts()


class WriteCounts:
    """write_counts of the last store asked for, kept while the same store is asked again
    (the console's pages of one snapshot). The console asks for every new snapshot's: a
    count over every base holder is 30-90 ms at 300 groups x 10 000 topics, so the base
    holders' part is carried from the last store's when only the delta grew
    (RouteTopics.base_write_counts), and the delta's part per shard of the delta
    (DeltaWriteCounts)."""

    def __init__(self) -> None:
        self._store: WriteCountable | None = None
        self._counts: dict[str, tuple[int, int]] = {}
        self._base: GroupCounts | None = None  # the RouteTopics' base_write_counts
        self._delta: DeltaWriteCounts | None = None  # and the delta's part, per shard
        self._lock = threading.Lock()

    def of(self, store: WriteCountable) -> dict[str, tuple[int, int]]:
        with self._lock:
            if store is not self._store:
                last = self._store if isinstance(self._store, RouteTopics) else None
                if isinstance(store, RouteTopics):
                    self._base = store.base_write_counts(last, self._base)
                    self._delta = DeltaWriteCounts(store, self._delta if last is not None else None)
                    self._counts = store.group_write_counts(self._base, self._delta)
                else:
                    self._base, self._delta = None, None
                    self._counts = write_counts(store)
                self._store = store
            return dict(self._counts)


def fleet(
    index: RouteIndex,
    live: Mapping[BrokerKey, JsonObj],
    since: Mapping[BrokerKey, int],
    perms: Mapping[str, tuple[int, int]] | None = None,
    topic_count: int | None = None,
) -> JsonObj:
    """`live`: brokerLiveTable entries by key (an empty dict where only liveness is known);
    `perms` (group -> topics, writable) and `topic_count` default to the index's routes."""
    info = index.cluster_info
    groups: Mapping[str, JsonObj] = info["brokerAddrTable"]
    listed: dict[str, list[str]] = {c: list(names) for c, names in info["clusterAddrTable"].items()}
    unlisted = set(groups) - {n for names in listed.values() for n in names}
    for name in unlisted:  # a group no cluster lists still shows, under its own cluster
        listed.setdefault(groups[name]["cluster"], []).append(name)
    perms = write_counts(index.store) if perms is None else perms
    clusters, broker_total, live_total = [], 0, 0
    for cluster in sorted(listed):
        rows = []
        for name in sorted(listed[cluster]):
            group: JsonObj = groups.get(name) or {}
            addrs = group.get("brokerAddrs", {})
            brokers = []
            for broker_id, addr in sorted(addrs.items()):
                key = (group.get("cluster", cluster), addr)
                entry = live.get(key)
                brokers.append(
                    {
                        "id": int(broker_id),
                        "role": "master" if int(broker_id) == MASTER_ID else "slave",
                        "addr": addr,
                        "live": entry is not None,
                        "aliveSince": since.get(key),
                        "lastHeartbeat": entry.get("lastUpdateTimestamp") if entry else None,
                        "heartbeatTimeoutMs": entry.get("heartbeatTimeoutMillis")
                        if entry
                        else None,
                        "dataVersion": entry.get("dataVersion") if entry else None,
                        "haServerAddr": entry.get("haServerAddr") if entry else None,
                    }
                )
            broker_total += len(brokers)
            live_total += sum(b["live"] for b in brokers)
            topics, writable = perms.get(name, (0, 0))
            rows.append(
                {
                    "name": name,
                    "zone": group.get("zoneName"),
                    "actingMaster": bool(group.get("enableActingMaster")),
                    "topics": topics,
                    "writableTopics": writable,
                    "brokers": brokers,
                }
            )
        clusters.append({"name": cluster, "groups": rows})
    return {
        "clusters": clusters,
        "counts": {
            "clusters": len(listed),
            "groups": len(groups),
            "brokers": broker_total,
            "liveBrokers": live_total,
            "liveTable": len(live),
            "topics": index.topic_count if topic_count is None else topic_count,
        },
    }
