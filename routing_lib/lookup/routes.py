"""An immutable, pre-encoded index of one RouteSnapshot: what the NameServer would answer.

Mirrors RocketMQ 5.x RouteInfoManager: pickupTopicRouteData (with the supportActingMaster
rewrite, and orderTopicConf from the KV table with orderMessageEnable), getAllClusterInfo,
getAllTopicList, getTopicsByCluster and getSystemTopicList; and KVConfigManager's reads
(getKVConfig, getKVListByNamespace).
Every answer is rendered to bytes at build time, so serving a request is a dict lookup.
Java's HashMap/HashSet orders are unspecified; here lists and maps are sorted so that the
bytes are deterministic (fastjson's MapSortField order for maps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from routing_lib.core.dump import canonical_dump, kv_config_table
from routing_lib.core.group_routes import MASTER_ID, PERM_WRITE
from routing_lib.core.tables import (
    BROKER_ADDR,
    CLUSTER_ADDR,
    FILTER_SERVER,
    KV_CONFIG,
    TOPIC_QUEUE,
    Row,
)
from routing_lib.lookup import jsonbody
from routing_lib.lookup.topics import SYNC_BROKER_MEMBER_GROUP_PREFIX, is_system_topic
from routing_lib.read.warehouse import RouteSnapshot

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG

JsonObj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Body:
    """One answer in both wire forms (see jsonbody): `legacy` is what RemotingSerializable
    .encode() gives, `standard` is plain JSON (new clients, and the HTTP API)."""

    legacy: bytes
    standard: bytes

    @staticmethod
    def of(obj: Any) -> Body:
        return Body(jsonbody.legacy(obj), jsonbody.standard(obj))


@dataclass(frozen=True, slots=True)
class _Broker:
    cluster: str
    name: str
    addrs: tuple[tuple[int, str], ...]  # (brokerId, addr) sorted by id
    enable_acting_master: bool
    zone_name: str | None

    def to_json(self, addrs: Mapping[int, str] | None = None) -> JsonObj:
        # BrokerData's getters in fastjson order; a null zoneName is left out like fastjson does.
        out: JsonObj = {
            "brokerAddrs": dict(self.addrs if addrs is None else addrs),
            "brokerName": self.name,
            "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            out["zoneName"] = self.zone_name
        return out


def _queue_json(row: Row) -> JsonObj:
    return {
        "brokerName": row["broker_name"],
        "perm": int(row["perm"]),
        "readQueueNums": int(row["read_queue_nums"]),
        "topicSysFlag": int(row["topic_sys_flag"]),
        "writeQueueNums": int(row["write_queue_nums"]),
    }


def _brokers(rows: list[Row]) -> dict[str, _Broker]:
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row["broker_name"], []).append(row)
    brokers = {}
    for name, group in grouped.items():
        first = group[0]  # cluster/actingMaster/zone are per group, repeated on each row
        zone = next((r["zone_name"] for r in group if r.get("zone_name") is not None), None)
        brokers[name] = _Broker(
            cluster=first["cluster"],
            name=name,
            addrs=tuple(sorted((int(r["broker_id"]), r["broker_addr"]) for r in group)),
            enable_acting_master=bool(first.get("enable_acting_master")),
            zone_name=zone,
        )
    return brokers


def _acting_master(broker_datas: list[JsonObj], queue_datas: list[JsonObj]) -> None:
    """pickupTopicRouteData with NamesrvConfig.supportActingMaster, in place: a group with no
    master (id 0) whose brokers enable acting master and whose queues for this topic lost the
    write perm presents its smallest-id broker as id 0."""
    if not any(b["brokerAddrs"] and MASTER_ID not in b["brokerAddrs"] for b in broker_datas):
        return
    for broker in broker_datas:
        addrs: dict[int, str] = broker["brokerAddrs"]
        if not addrs or MASTER_ID in addrs or not broker["enableActingMaster"]:
            continue
        queue = next((q for q in queue_datas if q["brokerName"] == broker["brokerName"]), None)
        if queue is not None and not queue["perm"] & PERM_WRITE:
            acting = addrs.pop(min(addrs))
            broker["brokerAddrs"] = {MASTER_ID: acting, **addrs}


class RouteIndex:
    """Read-only after build: attributes are tuples, bytes and mapping proxies. The JSON
    objects behind them (route(), cluster_info) are shared and must not be mutated."""

    __slots__ = (
        "versions",
        "watermark",
        "support_acting_master",
        "topics",
        "_routes",
        "_route_bodies",
        "cluster_info",
        "cluster_info_body",
        "topic_list_body",
        "cluster_topics",
        "_cluster_topic_bodies",
        "empty_topic_list_body",
        "system_topic_list",
        "system_topic_list_body",
        "system_topics",
        "system_topics_body",
        "live_brokers",
        "live_brokers_body",
        "broker_count",
        "order_message_enable",
        "kv",
        "_kv_list_bodies",
        "broker_topic_counts",
    )

    def __init__(
        self,
        snapshot: RouteSnapshot,
        support_acting_master: bool = False,
        order_message_enable: bool = False,
    ) -> None:
        tables = snapshot.tables
        self.versions: Mapping[str, int] = MappingProxyType(dict(snapshot.versions))
        self.watermark = snapshot.watermark
        self.support_acting_master = support_acting_master
        self.order_message_enable = order_message_enable

        # KVConfigManager: namespace -> {key: value}; an emptied namespace stays, empty.
        kv = kv_config_table(tables.get(KV_CONFIG, ()))
        self.kv: Mapping[str, Mapping[str, str]] = MappingProxyType(
            {ns: MappingProxyType(entries) for ns, entries in kv.items()}
        )
        # KVTable as RemotingSerializable encodes it: {"table": {key: value}}.
        self._kv_list_bodies: Mapping[str, Body] = MappingProxyType(
            {ns: Body.of({"table": entries}) for ns, entries in kv.items()}
        )

        brokers = _brokers(list(tables.get(BROKER_ADDR, ())))
        self.broker_count = len(brokers)
        queues: dict[str, dict[str, Row]] = {}
        topic_counts: dict[str, int] = {}
        for row in tables.get(TOPIC_QUEUE, ()):
            queues.setdefault(row["topic"], {})[row["broker_name"]] = row
            topic_counts[row["broker_name"]] = topic_counts.get(row["broker_name"], 0) + 1
        # What operateWritePermOfBroker would count for a brokerName (topics with its queues).
        self.broker_topic_counts: Mapping[str, int] = MappingProxyType(topic_counts)
        clusters: dict[str, set[str]] = {}
        for row in tables.get(CLUSTER_ADDR, ()):
            clusters.setdefault(row["cluster_name"], set()).add(row["broker_name"])
        filters = {
            (r["cluster_name"], r["broker_addr"]): list(r["filter_server_list"])
            for r in tables.get(FILTER_SERVER, ())
            if r["filter_server_list"]
        }

        routes: dict[str, JsonObj] = {}
        for topic in sorted(queues):
            route = self._pickup(topic, queues[topic], brokers, filters)
            if route is not None:
                routes[topic] = route
        self._routes: Mapping[str, JsonObj] = MappingProxyType(routes)
        self._route_bodies: Mapping[str, Body] = MappingProxyType(
            {topic: Body.of(route) for topic, route in routes.items()}
        )

        # getAllTopicList lists every topic of topicQueueTable, routable or not.
        self.topics: tuple[str, ...] = tuple(sorted(queues))
        self.topic_list_body = Body.of({"topicList": list(self.topics)})
        self.empty_topic_list_body = Body.of({"topicList": []})

        self.cluster_info: JsonObj = {
            "brokerAddrTable": {name: brokers[name].to_json() for name in sorted(brokers)},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(clusters.items())},
        }
        self.cluster_info_body = Body.of(self.cluster_info)

        by_cluster = {
            c: tuple(sorted(t for t, q in queues.items() if names & q.keys()))
            for c, names in clusters.items()
        }
        self.cluster_topics: Mapping[str, tuple[str, ...]] = MappingProxyType(by_cluster)
        self._cluster_topic_bodies: Mapping[str, Body] = MappingProxyType(
            {c: Body.of({"topicList": list(t)}) for c, t in by_cluster.items()}
        )

        # getSystemTopicList: cluster names and broker names are topics too (brokers create
        # them), plus the address of one broker so that tools can ask it for the rest.
        names = sorted(set(clusters) | {n for ns in clusters.values() for n in ns})
        self.system_topic_list: JsonObj = {"topicList": names}
        any_addr = next((b.addrs[0][1] for _, b in sorted(brokers.items()) if b.addrs), None)
        if any_addr is not None:
            self.system_topic_list = {"brokerAddr": any_addr, "topicList": names}
        self.system_topic_list_body = Body.of(self.system_topic_list)
        # What the broker side calls system topics (TopicValidator) joined with the above.
        self.system_topics: tuple[str, ...] = tuple(
            sorted({t for t in queues if is_system_topic(t)} | set(names))
        )
        self.system_topics_body = Body.of({"topicList": list(self.system_topics)})

        dump = canonical_dump(tables, snapshot.watermark)
        self.live_brokers: tuple[JsonObj, ...] = tuple(dump["brokerLiveTable"])
        self.live_brokers_body = Body.of(list(self.live_brokers))

    def _pickup(
        self,
        topic: str,
        queue_map: dict[str, Row],
        brokers: dict[str, _Broker],
        filters: dict[tuple[str, str], list[str]],
    ) -> JsonObj | None:
        queue_datas = [_queue_json(queue_map[name]) for name in sorted(queue_map)]
        found = [brokers[name] for name in sorted(queue_map) if name in brokers]
        if not found:
            return None  # Java: no broker data found -> no route
        filter_map: dict[str, list[str]] = {}
        if filters:
            for broker in found:
                for _, addr in broker.addrs:
                    servers = filters.get((broker.cluster, addr))
                    if servers:  # Java puts null for the others; fastjson drops null values
                        filter_map[addr] = servers
        broker_datas = [b.to_json() for b in found]
        if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            _acting_master(broker_datas, queue_datas)
        # TopicRouteData's fields in fastjson order; topicQueueMappingByBroker is null here
        # (no static topics), orderTopicConf too unless orderMessageEnable finds a KV value
        # (ClientRequestProcessor.getRouteInfoByTopic).
        route: JsonObj = {
            "brokerDatas": broker_datas,
            "filterServerTable": dict(sorted(filter_map.items())),
        }
        if self.order_message_enable:
            conf = self.kv.get(ORDER_TOPIC_CONFIG, {}).get(topic)
            if conf is not None:
                route["orderTopicConf"] = conf
        route["queueDatas"] = queue_datas
        return route

    # -- lookups (no work beyond a dict access) --

    def route(self, topic: str) -> JsonObj | None:
        """TopicRouteData as a JSON object (brokerAddrs keyed by int id), or None: no route."""
        return self._routes.get(topic)

    def route_body(self, topic: str) -> Body | None:
        return self._route_bodies.get(topic)

    def kv_value(self, namespace: str, key: str) -> str | None:
        """KVConfigManager.getKVConfig: the value, or None (no such namespace or key)."""
        return self.kv.get(namespace, {}).get(key)

    def kv_list_body(self, namespace: str) -> Body | None:
        """getKVListByNamespace: the KVTable body, or None for an unknown namespace (an
        emptied one answers an empty table)."""
        return self._kv_list_bodies.get(namespace)

    def topics_by_cluster_body(self, cluster: str) -> Body:
        # getTopicsByCluster on an unknown cluster answers an empty list (NPE caught in Java).
        return self._cluster_topic_bodies.get(cluster, self.empty_topic_list_body)

    @property
    def route_count(self) -> int:
        return len(self._routes)
