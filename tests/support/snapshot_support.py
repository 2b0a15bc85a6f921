"""Route-table changes for a warehouse written by the job's writer
(tests/support/writer_support.py), shared by tests/test_lookup_snapshots.py and
bench/lookup_scale_bench.py; plus a synthetic fleet of any size."""

from __future__ import annotations

from collections.abc import Iterable

from routing_lib.core.catalog import TOPIC_BASE, spec
from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    ROUTE_TABLES,
    TOPIC_QUEUE,
    Row,
)
from tests.support.lookup_support import addr, live, queue
from tests.support.writer_support import Change


def key_of(table: str, row: Row) -> tuple:
    return tuple(row[k] for k in spec(table).keys)


def one_per_key(table: str, changes: Iterable[Change]) -> list[Change]:
    """The last change of each key: the step hands the writer one change per row (a MERGE
    refuses two source rows for one target row)."""
    return list({key_of(table, row): (op, row) for op, row in changes}.values())


def group_layout(changes: dict[str, list[Change]]) -> dict[str, list[Change]]:
    """A batch's changes plus topic_base's: the lookup reads topicQueueTable from topic_base
    + topic_overlay (issue 36), and with no overlay row every group's base is its slice, so
    topic_base gets topic_queue_table's changes."""
    if TOPIC_QUEUE not in changes:
        return changes
    return {**changes, TOPIC_BASE: changes[TOPIC_QUEUE]}


def upserts(tables: dict[str, list[Row]]) -> dict[str, list[Change]]:
    return {table: [("upsert", row) for row in rows] for table, rows in tables.items()}


def fleet(groups: int, topics_per_group: int, pool: int | None = None) -> dict[str, list[Row]]:
    """`groups` broker groups (a master and a slave each, 3 clusters) with
    `topics_per_group` topics each, drawn from a pool of `pool` topics (None: every group its
    own topics, so groups x topics distinct routes)."""
    tables: dict[str, list[Row]] = {t: [] for t in ROUTE_TABLES}
    for g in range(groups):
        name, cluster = f"broker-{g}", f"cluster-{g % 3}"
        master, slave = (
            f"127.1.{g // 250}.{g % 250 + 1}:10911",
            f"127.2.{g // 250}.{g % 250 + 1}:10911",
        )
        tables[BROKER_ADDR] += [addr(name, 0, master, cluster), addr(name, 1, slave, cluster)]
        tables[CLUSTER_ADDR].append({"cluster_name": cluster, "broker_name": name})
        tables[BROKER_LIVE] += [live(cluster, master, name), live(cluster, slave, name)]
        for j in range(topics_per_group):
            topic = f"Topic{(g * 7919 + j * 104729) % pool}" if pool else f"Topic{g}_{j}"
            tables[TOPIC_QUEUE].append(queue(topic, name, (8, 16, 4)[j % 3]))
    # a pooled draw can hit one topic twice per group: keep one row per key
    unique = {(r["topic"], r["broker_name"]): r for r in tables[TOPIC_QUEUE]}
    tables[TOPIC_QUEUE] = list(unique.values())
    return tables
