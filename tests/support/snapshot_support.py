"""A warehouse written the way the job writes it, without Spark: tables created with Change
Data Feed on, each batch a delta-rs MERGE of row changes per route table (upserts and deletes
by key, txn = batch id), then the progress row. Shared by tests/test_lookup_snapshots.py and
bench/lookup_scale_bench.py; plus a synthetic fleet of any size."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    PROGRESS,
    ROUTE_TABLES,
    TABLE_KEYS,
    TOPIC_QUEUE,
    Row,
)
from routing_lib.read.arrow_schema import arrow_schema
from tests.support.lookup_support import addr, live, queue

APP_ID = "snapshot-test-writer"
CDF = {"delta.enableChangeDataFeed": "true"}

Change = tuple[str, Row]  # ("upsert" | "delete", row: all columns, or the key for a delete)


def key_of(table: str, row: Row) -> tuple:
    return tuple(row[k] for k in TABLE_KEYS[table])


class MergeWarehouse:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _commit(self, batch: int) -> CommitProperties:
        return CommitProperties(app_transactions=[Transaction(APP_ID, batch)])

    def create(self, tables: dict[str, list[Row]], watermark: int, batch: int = 0) -> None:
        """Every route table and route_progress, with these rows, as batch `batch`."""
        for table in ROUTE_TABLES:
            data = pa.Table.from_pylist(tables.get(table, []), schema=arrow_schema(table))
            write_deltalake(
                self.root / table,
                data,
                configuration=CDF,
                commit_properties=self._commit(batch),
            )
        self.progress(batch, watermark, create=True)

    def progress(self, batch: int, watermark: int, create: bool = False) -> None:
        data = pa.Table.from_pylist(
            [{"batch_id": batch, "watermark": watermark}], schema=arrow_schema(PROGRESS)
        )
        write_deltalake(
            self.root / PROGRESS,
            data,
            mode="append",
            configuration=CDF if create else None,
            commit_properties=self._commit(batch),
        )

    def merge(self, table: str, changes: Iterable[Change], batch: int) -> None:
        """One MERGE like the job's writer (routing_lib/spark/delta_writer.py); like the job's,
        it has one change per key (the last one given)."""
        schema = arrow_schema(table)
        names = schema.names
        last = {key_of(table, row): (op, row) for op, row in changes}
        rows = [{"op": op, **{n: row.get(n) for n in names}} for op, row in last.values()]
        if not rows:
            return
        source = pa.Table.from_pylist(rows, schema=schema.insert(0, pa.field("op", pa.string())))
        on = " AND ".join(f'(t."{k}" IS NOT DISTINCT FROM s."{k}")' for k in TABLE_KEYS[table])
        every = {f'"{n}"': f's."{n}"' for n in names}
        (
            DeltaTable(str(self.root / table))
            .merge(
                source,
                on,
                source_alias="s",
                target_alias="t",
                streamed_exec=False,
                commit_properties=self._commit(batch),
            )
            .when_matched_delete("s.op = 'delete'")
            .when_matched_update(every)
            .when_not_matched_insert(every, "s.op = 'upsert'")
            .execute()
        )

    def publish(self, batch: int, watermark: int, changes: dict[str, list[Change]]) -> None:
        for table, table_changes in changes.items():
            self.merge(table, table_changes, batch)
        self.progress(batch, watermark)


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
