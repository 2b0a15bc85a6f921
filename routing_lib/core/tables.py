"""The route tables as rows (snake_case, one dict per row) and the changes between two states
of a group. Row keys are the Delta tables' merge keys. The tables themselves (names, columns,
keys) are described in routing_lib/core/catalog.py; the names are re-exported here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

# the tables' names are re-exported (`as`): the job, readers and tests import them from here
from routing_lib.core.catalog import BROKER_ADDR as BROKER_ADDR
from routing_lib.core.catalog import BROKER_LIVE as BROKER_LIVE
from routing_lib.core.catalog import CLUSTER_ADDR as CLUSTER_ADDR
from routing_lib.core.catalog import DEAD_LETTER as DEAD_LETTER
from routing_lib.core.catalog import FILTER_SERVER as FILTER_SERVER
from routing_lib.core.catalog import KV_CONFIG as KV_CONFIG
from routing_lib.core.catalog import LATE_EVENT as LATE_EVENT
from routing_lib.core.catalog import PROGRESS as PROGRESS
from routing_lib.core.catalog import ROUTE_SPECS, names
from routing_lib.core.catalog import TOPIC_QUEUE as TOPIC_QUEUE
from routing_lib.core.group_routes import BrokerData, BrokerKey, BrokerLive, GroupRoutes
from routing_lib.core.overlay import EMPTY_GROUP_TOPICS, GroupTopics
from routing_lib.core.topic_table import EMPTY_TOPICS, QueueData, TopicTable

Row = dict[str, Any]
RowKey = tuple[Any, ...]  # a row's key column values (TABLE_KEYS order): strings, ints, None
# BrokerData as a value: (cluster, ((broker id, address), ...) sorted, enableActingMaster, zone)
BrokerDataTuple = tuple[str, tuple[tuple[int, str], ...], bool, str | None]
_Key = TypeVar("_Key", bound=RowKey)
_Value = TypeVar("_Value")

# table -> its key columns, in order
TABLE_KEYS: dict[str, tuple[str, ...]] = {spec.name: spec.keys for spec in ROUTE_SPECS}
ROUTE_TABLES = names(ROUTE_SPECS)


@dataclass(frozen=True)
class Change:
    table: str
    key: RowKey
    row: Row | None  # None: delete the row with this key


@dataclass(frozen=True)
class RoutesSnapshot:
    """A cheap copy of a group's tables (values are immutable, so shallow copies do)."""

    broker_data: BrokerDataTuple | None
    clusters: frozenset[str]
    topics: TopicTable  # immutable and shared with the routes: no copy
    live: dict[BrokerKey, BrokerLive]
    filter_servers: dict[BrokerKey, tuple[str, ...]]
    kv: dict[tuple[str, str | None], str | None]  # (namespace, key or None) -> value
    # the topics' base + overlay (immutable and shared): `topics` is its effective slice
    topic_state: GroupTopics = field(default_factory=lambda: EMPTY_GROUP_TOPICS)

    @staticmethod
    def of(routes: GroupRoutes) -> RoutesSnapshot:
        return RoutesSnapshot(
            broker_data=_broker_data_tuple(routes.broker_data),
            clusters=frozenset(routes.clusters),
            topics=routes.topics,
            live=dict(routes.live),
            filter_servers={k: tuple(v) for k, v in routes.filter_servers.items()},
            kv=_kv_entries(routes.kv) if routes.kv else {},
            topic_state=routes.topic_state,
        )


EMPTY = RoutesSnapshot(None, frozenset(), EMPTY_TOPICS, {}, {}, {})


def _kv_entries(kv: dict[str, dict[str, str]]) -> dict[tuple[str, str | None], str | None]:
    entries: dict[tuple[str, str | None], str | None] = {}
    for namespace, table in kv.items():
        entries[namespace, None] = None
        entries.update(((namespace, key), value) for key, value in table.items())
    return entries


def _broker_data_tuple(data: BrokerData | None) -> BrokerDataTuple | None:
    if data is None:
        return None
    return (
        data.cluster,
        tuple(sorted(data.broker_addrs.items())),
        data.enable_acting_master,
        data.zone_name,
    )


def _topic_row(name: str, topic: str, q: QueueData) -> Row:
    return {
        "topic": topic,
        "broker_name": name,
        "read_queue_nums": q.read_queue_nums,
        "write_queue_nums": q.write_queue_nums,
        "perm": q.perm,
        "topic_sys_flag": q.topic_sys_flag,
    }


def _broker_rows(name: str, data: BrokerDataTuple | None) -> dict[RowKey, Row]:
    if data is None:
        return {}
    cluster, addrs, acting, zone = data
    return {
        (name, bid): {
            "broker_name": name,
            "broker_id": bid,
            "broker_addr": addr,
            "cluster": cluster,
            "enable_acting_master": acting,
            "zone_name": zone,
        }
        for bid, addr in addrs
    }


def _live_row(name: str, key: BrokerKey, live: BrokerLive) -> Row:
    v = live.data_version
    return {
        "cluster_name": key[0],
        "broker_addr": key[1],
        "broker_name": name,
        "last_update_timestamp": live.last_update_timestamp,
        "heartbeat_timeout_millis": live.heartbeat_timeout_millis,
        "ha_server_addr": live.ha_server_addr,
        "data_version": {
            "state_version": v.state_version,
            "timestamp": v.timestamp,
            "counter": v.counter,
        },
    }


def _filter_row(name: str, key: BrokerKey, servers: tuple[str, ...]) -> Row:
    return {
        "cluster_name": key[0],
        "broker_addr": key[1],
        "broker_name": name,
        "filter_server_list": list(servers),
    }


def _diff_maps(
    table: str,
    old: dict[_Key, _Value],
    new: dict[_Key, _Value],
    row_of: Callable[[_Key, _Value], Row],
) -> list[Change]:
    if old == new:
        return []
    changes = [Change(table, k, None) for k in old.keys() - new.keys()]
    # `k not in old`: a KV namespace row's value is None
    changes += [
        Change(table, k, row_of(k, v)) for k, v in new.items() if k not in old or old[k] != v
    ]
    return changes


def _diff_topics(name: str, before: TopicTable, after: TopicTable) -> list[Change]:
    """topic_queue_table's changes: what `_diff_maps` gives for the two tables keyed by
    (topic, name), in the same order, without building those two maps. A group's removal reads
    only the names; otherwise C-level set operations on the tables' items find the changed
    topics, and rows are built for those only."""
    old = before.rows() if after else {}
    new = after.rows()
    if old == new and len(before) == len(after):  # (a removal does not decode the old rows)
        return []
    changes: list[Change] = []
    if not after or not old.keys() <= new.keys():
        # Deletes come in the order of `old_keys - new_keys` on the keyed maps, a set's: so
        # that set is made the same way, from maps with the same keys in the same order.
        old_keys = dict.fromkeys([(t, name) for t in before.names()])
        new_keys = dict.fromkeys([(t, name) for t in after.names()])
        changes += [Change(TOPIC_QUEUE, k, None) for k in old_keys.keys() - new_keys.keys()]
    changed: Iterable[str] = new
    if old:
        # (topic, row) pairs of `new` not in `old`: topics added or with a changed row, taken
        # in the table's order
        names = {t for t, _ in new.items() - old.items()}
        if len(names) < len(new):
            changed = filter(names.__contains__, new)
    changes += [Change(TOPIC_QUEUE, (t, name), _topic_row(name, t, new[t])) for t in changed]
    return changes


def _diff_per_broker(
    table: str,
    name: str,
    old: Mapping[BrokerKey, _Value],
    new: Mapping[BrokerKey, _Value],
    row_of: Callable[[str, BrokerKey, _Value], Row],
) -> list[Change]:
    """A per-broker table's changes: its rows are keyed with the group's name too (catalog),
    since another group may hold the same (cluster, address)."""
    if old == new:
        return []
    return _diff_maps(
        table,
        {(*k, name): v for k, v in old.items()},
        {(*k, name): v for k, v in new.items()},
        lambda k, value: row_of(name, (k[0], k[1]), value),
    )


def diff(
    name: str, before: RoutesSnapshot, after: RoutesSnapshot, topics: bool = True
) -> list[Change]:
    """Row changes that turn the tables of `before` into those of `after` for group `name`;
    topic_queue_table's only if `topics` (the group layout derives that table from topic_base
    and topic_overlay, issue 36: a fault diffs no topic)."""
    changes: list[Change] = []
    if topics and before.topics is not after.topics:  # copy on write: same object, same topics
        changes += _diff_topics(name, before.topics, after.topics)
    changes += _diff_maps(
        BROKER_ADDR,
        _broker_rows(name, before.broker_data),
        _broker_rows(name, after.broker_data),
        lambda k, row: row,
    )
    changes += _diff_maps(
        CLUSTER_ADDR,
        {(c, name): True for c in before.clusters},
        {(c, name): True for c in after.clusters},
        lambda k, _: {"cluster_name": k[0], "broker_name": name},
    )
    changes += _diff_per_broker(BROKER_LIVE, name, before.live, after.live, _live_row)
    changes += _diff_per_broker(
        FILTER_SERVER, name, before.filter_servers, after.filter_servers, _filter_row
    )
    if before.kv or after.kv:
        changes += _diff_maps(
            KV_CONFIG,
            before.kv,
            after.kv,
            lambda k, value: {"namespace": k[0], "key": k[1], "value": value},
        )
    return changes


def rows_of(routes: GroupRoutes) -> dict[str, list[Row]]:
    """All rows of one group (the reference replay and tests use this)."""
    tables: dict[str, list[Row]] = {t: [] for t in ROUTE_TABLES}
    for change in diff(routes.broker_name, EMPTY, RoutesSnapshot.of(routes)):
        # a diff from EMPTY only adds rows: every change carries one
        tables[change.table].append(change.row)  # type: ignore[arg-type]
    return tables
