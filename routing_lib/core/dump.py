"""The canonical dump of contract §4, built from table rows (from Delta or from the core)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from routing_lib.core.broker_rows import latest_filters, latest_live
from routing_lib.core.catalog import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    FILTER_SERVER,
    KV_CONFIG,
    TOPIC_QUEUE,
)
from routing_lib.core.tables import Row


def _data_version(row: Row) -> dict[str, int]:
    v = row["data_version"]
    return {
        "stateVersion": int(v["state_version"]),
        "timestamp": int(v["timestamp"]),
        "counter": int(v["counter"]),
    }


def canonical_dump(tables: Mapping[str, Iterable[Row]], watermark: int | None) -> dict[str, Any]:
    broker_addr: dict[str, Any] = {}
    for row in tables.get(BROKER_ADDR, ()):
        entry = broker_addr.setdefault(
            row["broker_name"],
            {
                "cluster": row["cluster"],
                "brokerName": row["broker_name"],
                "brokerAddrs": {},
                "enableActingMaster": bool(row.get("enable_acting_master")),
                "zoneName": row.get("zone_name"),
            },
        )
        entry["brokerAddrs"][str(int(row["broker_id"]))] = row["broker_addr"]
    for entry in broker_addr.values():
        entry["brokerAddrs"] = dict(sorted(entry["brokerAddrs"].items(), key=lambda i: int(i[0])))

    clusters: dict[str, list[str]] = {}
    for row in tables.get(CLUSTER_ADDR, ()):
        clusters.setdefault(row["cluster_name"], []).append(row["broker_name"])

    topics: dict[str, dict[str, Any]] = {}
    for row in tables.get(TOPIC_QUEUE, ()):
        topics.setdefault(row["topic"], {})[row["broker_name"]] = {
            "brokerName": row["broker_name"],
            "readQueueNums": int(row["read_queue_nums"]),
            "writeQueueNums": int(row["write_queue_nums"]),
            "perm": int(row["perm"]),
            "topicSysFlag": int(row["topic_sys_flag"]),
        }

    # one entry per (cluster, address), as RocketMQ's maps hold them (core/broker_rows.py)
    live_rows = list(tables.get(BROKER_LIVE, ()))
    live = [
        {
            "clusterName": r["cluster_name"],
            "brokerAddr": r["broker_addr"],
            "brokerName": r.get("broker_name"),
            "lastUpdateTimestamp": int(r["last_update_timestamp"]),
            "heartbeatTimeoutMillis": int(r["heartbeat_timeout_millis"]),
            "haServerAddr": r["ha_server_addr"],
            "dataVersion": _data_version(r),
        }
        for r in latest_live(live_rows)
    ]
    filters = [
        {
            "clusterName": r["cluster_name"],
            "brokerAddr": r["broker_addr"],
            "filterServerList": list(r["filter_server_list"]),
        }
        for r in latest_filters(tables.get(FILTER_SERVER, ()), live_rows)
    ]
    by_broker = lambda item: (item["clusterName"], item["brokerAddr"])  # noqa: E731
    kv = kv_config_table(tables.get(KV_CONFIG, ()))
    return {
        **({"kvConfigTable": kv} if kv else {}),
        "watermark": watermark,
        "brokerAddrTable": dict(sorted(broker_addr.items())),
        "clusterAddrTable": {c: sorted(n) for c, n in sorted(clusters.items())},
        "topicQueueTable": {t: dict(sorted(q.items())) for t, q in sorted(topics.items())},
        "brokerLiveTable": sorted(live, key=by_broker),
        "filterServerTable": sorted(filters, key=by_broker),
    }


def kv_config_table(rows: Iterable[Row]) -> dict[str, dict[str, str]]:
    """namespace -> {key: value}; a namespace row (key None) keeps an emptied namespace."""
    table: dict[str, dict[str, str]] = {}
    for row in rows:
        entries = table.setdefault(row["namespace"], {})
        if row["key"] is not None:
            entries[row["key"]] = row["value"]
    return {ns: dict(sorted(entries.items())) for ns, entries in sorted(table.items())}


# What tests and acceptance compare (contract §4): these keys and nothing else.
_PROJECTION = {
    "brokerAddrTable": ("cluster", "brokerName", "brokerAddrs"),
    "brokerLiveTable": (
        "clusterName",
        "brokerAddr",
        "lastUpdateTimestamp",
        "heartbeatTimeoutMillis",
        "haServerAddr",
        "dataVersion",
    ),
    "filterServerTable": ("clusterName", "brokerAddr", "filterServerList"),
}


def project(dump: Mapping[str, Any]) -> dict[str, Any]:
    """Keep exactly the keys of the contract's canonical dump."""
    out: dict[str, Any] = {
        "watermark": dump.get("watermark"),
        "clusterAddrTable": dump.get("clusterAddrTable", {}),
        "topicQueueTable": dump.get("topicQueueTable", {}),
    }
    keep = _PROJECTION["brokerAddrTable"]
    out["brokerAddrTable"] = {
        name: {k: entry[k] for k in keep} for name, entry in dump.get("brokerAddrTable", {}).items()
    }
    for table in ("brokerLiveTable", "filterServerTable"):
        out[table] = [{k: row[k] for k in _PROJECTION[table]} for row in dump.get(table, [])]
    if "kvConfigTable" in dump:  # only when a namespace exists (contract §4)
        out["kvConfigTable"] = dump["kvConfigTable"]
    return out


def to_json(dump: Mapping[str, Any]) -> str:
    return json.dumps(dump, indent=1, sort_keys=True)
