"""An immutable index of one snapshot of the route tables: what the NameServer would answer.

Mirrors RocketMQ 5.x RouteInfoManager: pickupTopicRouteData (with the supportActingMaster
rewrite, and orderTopicConf from the KV table with orderMessageEnable), getAllClusterInfo,
getAllTopicList, getTopicsByCluster and getSystemTopicList; and KVConfigManager's reads
(getKVConfig, getKVListByNamespace).
Java's HashMap/HashSet orders are unspecified; here lists and maps are sorted so that the
bytes are deterministic (fastjson's MapSortField order for maps).

Scale: topicQueueTable is a RouteTopics (route_topics.py): topic_base's index in flat arrays
(shared by the worker processes), read through each group's overlay at request time. A route
body is rendered per request by joining pre-rendered per-broker and per-queue fragments
(tens of microseconds for a topic on 100 brokers), so no body per topic is held in memory and
a new snapshot needs no rebuild of unchanged topics. Everything sized by brokers (cluster
info, live brokers, KV) is rendered when its table changes; what is sized by topics (the
topic lists, per-cluster lists, counts) is computed on first use and carried over to the next
snapshot while the tables it depends on did not change.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from routing_lib.core.broker_rows import latest_filters, shared_addresses
from routing_lib.core.catalog import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    FILTER_SERVER,
    KV_CONFIG,
    TOPIC_QUEUE,
)
from routing_lib.core.dump import canonical_dump, kv_config_table
from routing_lib.core.group_routes import MASTER_ID, PERM_WRITE
from routing_lib.core.tables import Row
from routing_lib.lookup import jsonbody, namesrv_config
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.route_topics import Catalog, Holders, RouteTopics
from routing_lib.lookup.topic_store import SHARDS, Entry, Queue, queues_of
from routing_lib.lookup.topics import SYNC_BROKER_MEMBER_GROUP_PREFIX
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import WarehouseSnapshot

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
# The tables sized by brokers (not topics): held as rows, re-read whole when they change.
SMALL_TABLES = (BROKER_ADDR, CLUSTER_ADDR, BROKER_LIVE, FILTER_SERVER, KV_CONFIG)

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


class RouteBody:
    """A topic's route in both wire forms, each rendered (or taken from the index's cache)
    when first read."""

    __slots__ = ("_index", "_topic", "_legacy", "_standard")

    def __init__(self, index: RouteIndex, topic: str, standard: bytes | None = None) -> None:
        self._index = index
        self._topic = topic
        self._legacy: bytes | None = None
        self._standard = standard

    @property
    def standard(self) -> bytes:
        if self._standard is None:
            self._standard = self._index._cached(self._topic, True)
        return self._standard

    @property
    def legacy(self) -> bytes:
        if self._legacy is None:
            self._legacy = self._index._cached(self._topic, False)
        return self._legacy


# Rendered bodies kept per cache shard (two shards per store shard: standard and legacy); a
# full shard is emptied, so memory stays bounded whatever clients ask for: at most
# 2 x 256 x 32 KiB = 16 MiB of bodies per process (a route on 100 brokers is ~25 KiB; a miss
# renders it again from fragments in tens of microseconds). Each entry costs ~150 bytes
# besides its body (the dict slot, the key, the bytes object): a client asking random topics
# of 3 M fills every shard, and 64 MiB of one-group routes were ~60 MB of RSS per process.
MAX_CACHED_PER_SHARD = 128
MAX_CACHED_BYTES_PER_SHARD = 32 * 1024


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


def _queue_json(name: str, queue: Queue) -> JsonObj:
    read, write, perm, sys_flag = queue
    return {
        "brokerName": name,
        "perm": perm,
        "readQueueNums": read,
        "topicSysFlag": sys_flag,
        "writeQueueNums": write,
    }


# (broker name, queue, standard?) -> its QueueData bytes: few distinct, shared by all indexes.
_QUEUE_FRAGMENTS: dict[tuple[str, Queue, bool], bytes] = {}
_MAX_QUEUE_FRAGMENTS = 200_000


def _queue_fragment(name: str, queue: Queue, standard: bool) -> bytes:
    key = (name, queue, standard)
    fragment = _QUEUE_FRAGMENTS.get(key)
    if fragment is None:
        obj = _queue_json(name, queue)
        fragment = jsonbody.standard(obj) if standard else jsonbody.legacy(obj)
        if len(_QUEUE_FRAGMENTS) >= _MAX_QUEUE_FRAGMENTS:
            _QUEUE_FRAGMENTS.clear()  # a bound, not a policy: rebuilt on demand
        _QUEUE_FRAGMENTS[key] = fragment
    return fragment


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


class _BrokerPart:
    """What brokerAddrTable and clusterAddrTable give: per-broker fragments, cluster info."""

    def __init__(self, broker_rows: list[Row], cluster_rows: list[Row]) -> None:
        self.brokers = _brokers(broker_rows)
        self.standard = {n: jsonbody.standard(b.to_json()) for n, b in self.brokers.items()}
        self.legacy = {n: jsonbody.legacy(b.to_json()) for n, b in self.brokers.items()}
        self.masterless = frozenset(
            n for n, b in self.brokers.items() if all(i != MASTER_ID for i, _ in b.addrs)
        )
        clusters: dict[str, set[str]] = {}
        for row in cluster_rows:
            clusters.setdefault(row["cluster_name"], set()).add(row["broker_name"])
        self.clusters = clusters
        self.cluster_info: JsonObj = {
            "brokerAddrTable": {n: self.brokers[n].to_json() for n in sorted(self.brokers)},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(clusters.items())},
        }
        self.cluster_info_body = Body.of(self.cluster_info)
        # getSystemTopicList: cluster names and broker names are topics too (brokers create
        # them), plus the address of one broker so that tools can ask it for the rest.
        self.names = sorted(set(clusters) | {n for ns in clusters.values() for n in ns})
        self.system_topic_list: JsonObj = {"topicList": self.names}
        any_addr = next((b.addrs[0][1] for _, b in sorted(self.brokers.items()) if b.addrs), None)
        if any_addr is not None:
            self.system_topic_list = {"brokerAddr": any_addr, "topicList": self.names}
        self.system_topic_list_body = Body.of(self.system_topic_list)


class _KvPart:
    def __init__(self, rows: list[Row]) -> None:
        # KVConfigManager: namespace -> {key: value}; an emptied namespace stays, empty.
        kv = kv_config_table(rows)
        self.kv: Mapping[str, Mapping[str, str]] = MappingProxyType(
            {ns: MappingProxyType(entries) for ns, entries in kv.items()}
        )
        # KVTable as RemotingSerializable encodes it: {"table": {key: value}}.
        self.bodies: Mapping[str, Body] = MappingProxyType(
            {ns: Body.of({"table": entries}) for ns, entries in kv.items()}
        )


class _LivePart:
    """brokerLiveTable changes with every batch (each broker's last update): its body is
    rendered when first asked for (GET /brokers/live), not with every snapshot."""

    def __init__(self, rows: list[Row], watermark: int | None) -> None:
        dump = canonical_dump({BROKER_LIVE: rows}, watermark)
        self.live_brokers: tuple[JsonObj, ...] = tuple(dump["brokerLiveTable"])
        self._body: Body | None = None

    @property
    def body(self) -> Body:
        if self._body is None:  # two readers may both render it: the same bytes
            self._body = Body.of(list(self.live_brokers))
        return self._body


class _FilterPart:
    def __init__(self, rows: list[Row], live_rows: list[Row]) -> None:
        # An address with filter rows of two brokerNames is ranked by the live rows, so this
        # part then follows broker_live_table too (core/broker_rows.py); usually it does not.
        self.follows_live = shared_addresses(rows)
        self.filters: dict[tuple[str, str], list[str]] = {
            (r["cluster_name"], r["broker_addr"]): list(r["filter_server_list"])
            for r in latest_filters(rows, live_rows)
            if r["filter_server_list"]
        }


class _TopicViews:
    """What is sized by topics, computed on first use (one index's; carried over while the
    tables it depends on stay)."""

    __slots__ = (
        "topics",
        "topic_list",
        "system_topics",
        "cluster_topics",
        "cluster_bodies",
        "broker_counts",
        "route_count",
        "unit_lists",
    )

    def __init__(self) -> None:
        self.topics: tuple[str, ...] | None = None
        self.topic_list: Body | None = None
        self.system_topics: tuple[tuple[str, ...], Body] | None = None
        self.cluster_topics: dict[str, tuple[str, ...]] = {}
        self.cluster_bodies: dict[str, Body] = {}
        self.broker_counts: Mapping[str, int] | None = None
        self.route_count: int | None = None
        self.unit_lists: dict[UnitFilter, Body] = {}


def topics_of_rows(rows: Iterable[Row]) -> RouteTopics:
    """topicQueueTable from its rows (a hand-built or replayed snapshot): each row a base
    row of a group with a trivial overlay."""
    last = {(r["topic"], r["broker_name"]): r for r in rows}  # a repeated key: the last wins
    table = pa.Table.from_pylist(list(last.values()), schema=arrow_schema(TOPIC_QUEUE))
    return RouteTopics.of(BaseIndex.build(table, 0))


class _ClusterTopics(Mapping[str, tuple[str, ...]]):
    """getTopicsByCluster per cluster, each list computed when first asked for."""

    def __init__(self, index: RouteIndex) -> None:
        self._index = index

    def __getitem__(self, cluster: str) -> tuple[str, ...]:
        return self._index._cluster_topic_list(cluster)

    def __contains__(self, cluster: object) -> bool:
        return cluster in self._index._broker_part.clusters

    def __iter__(self) -> Iterator[str]:
        return iter(self._index._broker_part.clusters)

    def __len__(self) -> int:
        return len(self._index._broker_part.clusters)


EMPTY_TOPIC_LIST = Body.of({"topicList": []})

# TopicSysFlag's bits
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


class UnitFilter(enum.Enum):
    """RouteInfoManager's three topic lists by the unit bits of a topic's topicSysFlag."""

    UNIT = "getUnitTopics"  # GET_UNIT_TOPIC_LIST: the unit flag set
    HAS_UNIT_SUB = "getHasUnitSubTopicList"  # GET_HAS_UNIT_SUB_TOPIC_LIST: unit-sub set
    HAS_UNIT_SUB_UNUNIT = "getHasUnitSubUnUnitTopicList"  # unit-sub set, unit not set

    def accepts(self, sys_flag: int) -> bool:
        unit, unit_sub = bool(sys_flag & FLAG_UNIT), bool(sys_flag & FLAG_UNIT_SUB)
        if self is UnitFilter.UNIT:
            return unit
        if self is UnitFilter.HAS_UNIT_SUB:
            return unit_sub
        return unit_sub and not unit


def java_string_hash(text: str) -> int:
    """String.hashCode as an unsigned 32-bit value (over UTF-16 code units)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def first_in_java_hashmap(names: tuple[str, ...]) -> int:
    """The position in `names` of the key a Java HashMap<String, _> holding them iterates
    first: the lowest bucket ((h ^ h >>> 16) & (capacity - 1)) at the capacity that many keys
    grow a default map to. Keys sharing that bucket come in insertion order, which the
    tables do not keep: the smallest name is taken then."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2
    best, best_key = 0, None
    for i, name in enumerate(names):
        h = java_string_hash(name)
        key = ((h ^ (h >> 16)) & (capacity - 1), name)
        if best_key is None or key < best_key:
            best, best_key = i, key
    return best


class _Moved:
    """The present holders (`get`'s groups) of some topics in two indexes: what a snapshot's
    changed topics did to the topic counts, as arrays over both."""

    def __init__(self, previous: RouteIndex, index: RouteIndex, topics: list[str]) -> None:
        self.previous, self.index, self.count = previous, index, len(topics)
        self.catalog = Catalog(index.store.base)
        self.before = previous.store.holders(topics, present=True, catalog=self.catalog)
        self.after = index.store.holders(topics, present=True, catalog=self.catalog)

    def same_names(self) -> bool:
        """Is each topic in both indexes' topicQueueTable or in neither?"""
        has_before = self.before.per_topic(self.count) > 0
        return bool(np.array_equal(has_before, self.after.per_topic(self.count) > 0))

    def _per_name(self, holders: Holders) -> npt.NDArray[np.int64]:
        return np.bincount(holders.group, minlength=len(self.catalog.names))

    def count_changes(self) -> dict[str, int]:
        """Per group name: topics listing it after less before (the nonzero ones)."""
        by = self._per_name(self.after) - self._per_name(self.before)
        names = self.catalog.names
        return {names[g]: int(by[g]) for g in np.flatnonzero(by).tolist()}

    def listed_after(self) -> dict[str, int]:
        """Per group name: the topics listing it after."""
        names = self.catalog.names
        return {names[g]: int(n) for g, n in enumerate(self._per_name(self.after).tolist())}

    def _routable(self, holders: Holders, brokers: Mapping[str, object]) -> int:
        known = np.array([name in brokers for name in self.catalog.names], bool)
        listed = holders.topic[known[holders.group]] if len(known) else holders.topic[:0]
        return int(np.count_nonzero(np.bincount(listed, minlength=self.count)))

    def routable_change(self) -> int:
        """Routable topics (a holder on a known broker) after less before."""
        return self._routable(self.after, self.index._broker_part.brokers) - self._routable(
            self.before, self.previous._broker_part.brokers
        )


class RouteIndex:
    """Read-only after build. The JSON objects it hands out (route(), cluster_info) are
    shared and must not be mutated."""

    __slots__ = (
        "versions",
        "watermark",
        "support_acting_master",
        "order_message_enable",
        "settings",
        "store",
        "rows",
        "_broker_part",
        "_kv_part",
        "_live_part",
        "_filter_part",
        "_views",
        "_cache",
    )

    def __init__(
        self,
        snapshot: WarehouseSnapshot,
        support_acting_master: bool = False,
        order_message_enable: bool = False,
    ) -> None:
        tables = snapshot.tables
        self._assemble(
            topics_of_rows(tables.get(TOPIC_QUEUE, ())),
            {t: list(tables.get(t, ())) for t in SMALL_TABLES},
            snapshot.versions,
            snapshot.watermark,
            support_acting_master,
            order_message_enable,
        )

    @classmethod
    def assemble(
        cls,
        store: RouteTopics,
        rows: Mapping[str, list[Row]],
        versions: Mapping[str, int],
        watermark: int | None,
        *,
        support_acting_master: bool = False,
        order_message_enable: bool = False,
        previous: RouteIndex | None = None,
        changed_topics: frozenset[str] | None = None,
        flipped_groups: frozenset[str] = frozenset(),
    ) -> RouteIndex:
        """An index of `store` and the small tables' `rows`; a table missing from `rows` is
        the one of `previous`, and so are the parts built from it. `changed_topics`: the
        topics whose base entries differ from `previous.store` (None: any may differ);
        `flipped_groups`: the groups whose overlay differs (every topic they hold may read
        otherwise)."""
        index = object.__new__(cls)
        index._assemble(
            store,
            rows,
            versions,
            watermark,
            support_acting_master,
            order_message_enable,
            previous,
            changed_topics,
            flipped_groups,
        )
        return index

    def _assemble(
        self,
        store: RouteTopics,
        rows: Mapping[str, list[Row]],
        versions: Mapping[str, int],
        watermark: int | None,
        support_acting_master: bool,
        order_message_enable: bool,
        previous: RouteIndex | None = None,
        changed_topics: frozenset[str] | None = None,
        flipped_groups: frozenset[str] = frozenset(),
    ) -> None:
        self.versions: Mapping[str, int] = MappingProxyType(dict(versions))
        self.watermark = watermark
        self.support_acting_master = support_acting_master
        self.order_message_enable = order_message_enable
        self.store = store
        old = previous.rows if previous is not None else {}
        self.rows: Mapping[str, list[Row]] = MappingProxyType(
            {t: rows[t] if t in rows else old.get(t, []) for t in SMALL_TABLES}
        )

        self._broker_part: _BrokerPart = (
            previous._broker_part
            if previous is not None and BROKER_ADDR not in rows and CLUSTER_ADDR not in rows
            else _BrokerPart(self.rows[BROKER_ADDR], self.rows[CLUSTER_ADDR])
        )
        self._kv_part: _KvPart = (
            previous._kv_part
            if previous is not None and KV_CONFIG not in rows
            else _KvPart(self.rows[KV_CONFIG])
        )
        self._live_part: _LivePart = (
            previous._live_part
            if previous is not None and BROKER_LIVE not in rows
            else _LivePart(self.rows[BROKER_LIVE], watermark)
        )
        self._filter_part: _FilterPart = (
            previous._filter_part
            if previous is not None
            and FILTER_SERVER not in rows
            and not (BROKER_LIVE in rows and previous._filter_part.follows_live)
            else _FilterPart(self.rows[FILTER_SERVER], self.rows[BROKER_LIVE])
        )
        # What routes apply: the options above, or an operator's updateNamesrvConfig as
        # published in the KV table (a KV change empties the route cache below).
        self.settings = namesrv_config.settings(
            self._kv_part.kv.get(namesrv_config.NAMESPACE, {}),
            order_message_enable=order_message_enable,
            support_acting_master=support_acting_master,
        )
        self._views = _TopicViews()
        # a flip changes every topic of its group: no rendered body is carried over
        self._cache = self._carry_cache(previous, None if flipped_groups else changed_topics)
        if previous is not None:
            self._carry_views(previous, changed_topics, flipped_groups)

    def _carry_cache(
        self, previous: RouteIndex | None, changed: frozenset[str] | None
    ) -> list[dict[str, bytes]]:
        """Rendered bodies still true: those of `previous` while the brokers, filter servers
        and KV it rendered with are the same, except the shards a changed topic falls in.
        Shared shards are filled by readers of either index: a body is the same in both."""
        if (
            previous is None
            or changed is None
            or previous._broker_part is not self._broker_part
            or previous._filter_part is not self._filter_part
            or previous._kv_part is not self._kv_part
        ):
            return [{} for _ in range(2 * SHARDS)]
        cache = list(previous._cache)
        for topic in changed:
            shard = 2 * self.store.shard_of(topic)
            cache[shard], cache[shard + 1] = {}, {}
        return cache

    def _cached(self, topic: str, standard: bool) -> bytes:
        shard = self._cache[2 * self.store.shard_of(topic) + standard]
        body = shard.get(topic)
        if body is None:
            body = self._render(topic, standard) or b""
            if (
                len(shard) >= MAX_CACHED_PER_SHARD
                or (len(shard) + 1) * len(body) > MAX_CACHED_BYTES_PER_SHARD
            ):  # an estimate by this body's size: no byte count to keep per shared shard
                shard.clear()
            shard[topic] = body
        return body

    def _carry_views(
        self, previous: RouteIndex, changed: frozenset[str] | None, flipped: frozenset[str]
    ) -> None:
        """Reuse what `previous` computed from topics, where still true."""
        old, new = previous._views, self._views
        # the changed topics' present holders before and after, as arrays (vectorised: a
        # base change of 10 000 topics is not 10 000 rounds of Python)
        moved = _Moved(previous, self, list(changed)) if changed else None
        same_topics = changed is not None and not changed and not flipped
        same_names = changed is not None and not flipped and (moved is None or moved.same_names())
        same_brokers = self._broker_part is previous._broker_part
        if same_names:
            new.topics, new.topic_list = old.topics, old.topic_list
            if same_brokers:
                new.system_topics = old.system_topics
        if same_topics:
            new.unit_lists = old.unit_lists
        if same_topics and same_brokers:
            new.cluster_topics, new.cluster_bodies = old.cluster_topics, old.cluster_bodies
        if changed is None or old.broker_counts is None:
            return
        # Per broker name, how many topics list it: kept up to date from the changed topics
        # (a topic lists a name at most once: the counts move by the per-name differences).
        counts = dict(old.broker_counts)
        if moved is not None:
            for name, by in moved.count_changes().items():
                counts[name] = counts.get(name, 0) + by
                if not counts[name]:
                    del counts[name]
        # A flipped group's count is its present holders' (its 10 000 topics are not diffed
        # one by one); the other groups list the same topics as before but the changed ones.
        for name, n in self.store.group_topic_counts(flipped).items():
            if n:
                counts[name] = n
            else:
                counts.pop(name, None)
        new.broker_counts = MappingProxyType(counts)
        # Routable = lists a known broker. Only the changed topics can have moved, unless a
        # broker name came or went that an unchanged topic lists (then count them all), or
        # a group flipped (counted again: a vectorised count over the per-topic counts).
        came_or_went = previous._broker_part.brokers.keys() ^ self._broker_part.brokers.keys()
        listed = moved.listed_after() if moved is not None else {}
        if (
            not flipped
            and old.route_count is not None
            and all(counts.get(name, 0) == listed.get(name, 0) for name in came_or_went)
        ):
            new.route_count = old.route_count + (moved.routable_change() if moved else 0)

    # -- routes --

    def _routable(self, topic: str) -> bool:
        entry = self.store.get(topic)
        brokers = self._broker_part.brokers
        return entry is not None and any(n in brokers for n in entry[0::2])

    def route(self, topic: str) -> JsonObj | None:
        """TopicRouteData as a JSON object (brokerAddrs keyed by int id), or None: no route."""
        queue_map = queues_of(self.store.get(topic))
        brokers = self._broker_part.brokers
        found = [brokers[name] for name in sorted(queue_map) if name in brokers]
        if not found:
            return None  # Java: no broker data found -> no route
        queue_datas = [_queue_json(name, queue_map[name]) for name in sorted(queue_map)]
        broker_datas = [b.to_json() for b in found]
        if self.settings.support_acting_master and not topic.startswith(
            SYNC_BROKER_MEMBER_GROUP_PREFIX
        ):
            _acting_master(broker_datas, queue_datas)
        # TopicRouteData's fields in fastjson order; topicQueueMappingByBroker is null here
        # (no static topics), orderTopicConf too unless orderMessageEnable finds a KV value
        # (ClientRequestProcessor.getRouteInfoByTopic).
        route: JsonObj = {
            "brokerDatas": broker_datas,
            "filterServerTable": self._filter_map([b.name for b in found]),
        }
        conf = self._order_conf(topic)
        if conf is not None:
            route["orderTopicConf"] = conf
        route["queueDatas"] = queue_datas
        return route

    def _filter_map(self, found: list[str]) -> dict[str, list[str]]:
        filters = self._filter_part.filters
        filter_map: dict[str, list[str]] = {}
        if filters:
            brokers = self._broker_part.brokers
            for name in found:
                broker = brokers[name]
                for _, addr in broker.addrs:
                    servers = filters.get((broker.cluster, addr))
                    if servers:  # Java puts null for the others; fastjson drops null values
                        filter_map[addr] = servers
        return dict(sorted(filter_map.items()))

    def _order_conf(self, topic: str) -> str | None:
        if not self.settings.order_message_enable:
            return None
        return self._kv_part.kv.get(ORDER_TOPIC_CONFIG, {}).get(topic)

    def _render(self, topic: str, standard: bool) -> bytes | None:
        """The route's bytes, joined from the brokers' and queues' fragments; the same bytes
        as jsonbody.standard/legacy(self.route(topic)) (the tests hold it to that)."""
        entry: Entry | None = self.store.get(topic)
        if entry is None:
            return None
        part = self._broker_part
        names = entry[0::2]
        found = [n for n in names if n in part.brokers]
        if not found:
            return None
        if (
            self.settings.support_acting_master
            and not part.masterless.isdisjoint(found)
            and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX)
        ):  # the rewrite may apply: the object path decides
            route = self.route(topic)
            return jsonbody.standard(route) if standard else jsonbody.legacy(route)
        fragments = part.standard if standard else part.legacy
        filters = self._filter_map(found) if self._filter_part.filters else None
        out = [
            b'{"brokerDatas":[',
            b",".join([fragments[n] for n in found]),
            b'],"filterServerTable":',
            b"{}"
            if not filters
            else (jsonbody.standard(filters) if standard else jsonbody.legacy(filters)),
        ]
        conf = self._order_conf(topic)
        if conf is not None:
            out += [b',"orderTopicConf":', json.dumps(conf, ensure_ascii=standard).encode()]
        out += [
            b',"queueDatas":[',
            b",".join(
                [_queue_fragment(n, q, standard) for n, q in zip(names, entry[1::2], strict=True)]
            ),
            b"]}",
        ]
        return b"".join(out)

    def route_bytes(self, topic: str, standard: bool) -> bytes | None:
        """The route's body in one wire form (route_body's, without an object per request),
        or None: no route."""
        body = self._cache[2 * self.store.shard_of(topic) + standard].get(topic)
        if body is not None:  # the hot path: one hash, two dict lookups
            return body
        if not self._routable(topic):
            return None
        return self._cached(topic, standard)

    def route_body(self, topic: str) -> RouteBody | None:
        cached = self._cache[2 * self.store.shard_of(topic) + 1].get(topic)
        if cached is not None:  # the hot path: one hash, two dict lookups
            return RouteBody(self, topic, cached)
        if not self._routable(topic):
            return None
        return RouteBody(self, topic)

    # -- brokers, KV --

    @property
    def cluster_info(self) -> JsonObj:
        return self._broker_part.cluster_info

    @property
    def cluster_info_body(self) -> Body:
        return self._broker_part.cluster_info_body

    @property
    def system_topic_list(self) -> JsonObj:
        return self._broker_part.system_topic_list

    @property
    def system_topic_list_body(self) -> Body:
        return self._broker_part.system_topic_list_body

    @property
    def broker_count(self) -> int:
        return len(self._broker_part.brokers)

    @property
    def live_brokers(self) -> tuple[JsonObj, ...]:
        return self._live_part.live_brokers

    @property
    def live_brokers_body(self) -> Body:
        return self._live_part.body

    @property
    def kv(self) -> Mapping[str, Mapping[str, str]]:
        return self._kv_part.kv

    def kv_value(self, namespace: str, key: str) -> str | None:
        """KVConfigManager.getKVConfig: the value, or None (no such namespace or key)."""
        return self._kv_part.kv.get(namespace, {}).get(key)

    def kv_list_body(self, namespace: str) -> Body | None:
        """getKVListByNamespace: the KVTable body, or None for an unknown namespace (an
        emptied one answers an empty table)."""
        return self._kv_part.bodies.get(namespace)

    # -- sized by topics: computed on first use --

    @property
    def topics(self) -> tuple[str, ...]:
        """getAllTopicList lists every topic of topicQueueTable, routable or not."""
        views = self._views
        if views.topics is None:
            views.topics = tuple(self.store.names())
        return views.topics

    @property
    def topic_list_body(self) -> Body:
        views = self._views
        if views.topic_list is None:
            views.topic_list = Body.of({"topicList": list(self.topics)})
        return views.topic_list

    @property
    def empty_topic_list_body(self) -> Body:
        return EMPTY_TOPIC_LIST

    @property
    def cluster_topics(self) -> Mapping[str, tuple[str, ...]]:
        return _ClusterTopics(self)

    def _cluster_topic_list(self, cluster: str) -> tuple[str, ...]:
        views = self._views
        found = views.cluster_topics.get(cluster)
        if found is None:
            names = self._broker_part.clusters[cluster]  # KeyError: no such cluster
            found = tuple(self.store.names_with_group_in(names))
            views.cluster_topics[cluster] = found
        return found

    def topics_by_cluster_body(self, cluster: str) -> Body:
        # getTopicsByCluster on an unknown cluster answers an empty list (NPE caught in Java).
        if cluster not in self._broker_part.clusters:
            return EMPTY_TOPIC_LIST
        views = self._views
        body = views.cluster_bodies.get(cluster)
        if body is None:
            body = Body.of({"topicList": list(self._cluster_topic_list(cluster))})
            views.cluster_bodies[cluster] = body
        return body

    def _system_topics(self) -> tuple[tuple[str, ...], Body]:
        views = self._views
        if views.system_topics is None:
            # What the broker side calls system topics (TopicValidator) joined with the names.
            topics = tuple(
                sorted(set(self.store.system_topic_names()) | set(self._broker_part.names))
            )
            views.system_topics = (topics, Body.of({"topicList": list(topics)}))
        return views.system_topics

    @property
    def system_topics(self) -> tuple[str, ...]:
        return self._system_topics()[0]

    @property
    def system_topics_body(self) -> Body:
        return self._system_topics()[1]

    def unit_topic_list_body(self, which: UnitFilter) -> Body:
        """getUnitTopics / getHasUnitSubTopicList / getHasUnitSubUnUnitTopicList: every topic
        of topicQueueTable (routable or not) whose first queue data, in the Java HashMap's
        order of its broker names, has the unit bits `which` asks for."""
        views = self._views
        body = views.unit_lists.get(which)
        if body is None:
            found = []
            for topic, entry in self.store.items():
                names = entry[0::2]
                first = first_in_java_hashmap(names) if len(names) > 1 else 0
                if which.accepts(entry[2 * first + 1][3]):
                    found.append(topic)
            body = Body.of({"topicList": sorted(found)})
            views.unit_lists[which] = body
        return body

    def broker_member_group_body(self, cluster: str | None, broker_name: str | None) -> Body:
        """getBrokerMemberGroup: the group's brokerAddrs from brokerAddrTable (whatever its
        cluster: Java looks the name up alone), the cluster as asked; empty when unknown.
        A null name or cluster is left out, as fastjson leaves out null fields."""
        broker = self._broker_part.brokers.get(broker_name) if broker_name is not None else None
        group: JsonObj = {"brokerAddrs": dict(broker.addrs) if broker is not None else {}}
        if broker_name is not None:
            group["brokerName"] = broker_name
        if cluster is not None:
            group["cluster"] = cluster
        return Body.of({"brokerMemberGroup": group})

    @property
    def broker_topic_counts(self) -> Mapping[str, int]:
        """What operateWritePermOfBroker would count for a brokerName (topics with its
        queues)."""
        views = self._views
        if views.broker_counts is None:
            views.broker_counts = MappingProxyType(self.store.group_topic_counts())
        return views.broker_counts

    @property
    def route_count(self) -> int:
        """Topics with a route (a queue on a known broker)."""
        views = self._views
        if views.route_count is None:
            views.route_count = self.store.count_with_group_in(self._broker_part.brokers)
        return views.route_count

    @property
    def topic_count(self) -> int:
        return len(self.store)
