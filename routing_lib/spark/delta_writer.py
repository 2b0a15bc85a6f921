"""foreachBatch sink: one idempotent Delta commit per table per micro-batch.

Route tables get a MERGE of the batch's row changes; dead letters, late events and the
progress row are appended. Every commit carries (txnAppId, txnVersion=batch id), so a batch
replayed after a crash is skipped by Delta table by table: nothing is written twice.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from routing_lib import storage
from routing_lib.core.history import (
    HISTORY_CLOSE_COLUMNS,
    HISTORY_IDENTITY,
    HISTORY_TABLE_DDL,
    HISTORY_TABLES,
)
from routing_lib.core.tables import (
    DEAD_LETTER,
    LATE_EVENT,
    PROGRESS,
    ROUTE_TABLES,
    SIDE_TABLE_DDL,
    TABLE_DDL,
    TABLE_KEYS,
    ddl_columns,
)

log = logging.getLogger("routelake.writer")
ALL_TABLES = {**TABLE_DDL, **SIDE_TABLE_DDL, **HISTORY_TABLE_DDL}
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def ensure_tables(spark: SparkSession, warehouse: str) -> None:
    """Create every table (Change Data Feed on) that does not exist yet."""
    for table, ddl in ALL_TABLES.items():
        path = storage.join(warehouse, table)  # a folder or an s3a:// URI
        if storage.is_dir(storage.join(path, "_delta_log")):
            continue
        partitioning = "PARTITIONED BY (event_date) " if table in HISTORY_TABLE_DDL else ""
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({ddl}) USING delta "
            f"{partitioning}TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )


@dataclass
class BatchReport:
    batch_id: int
    watermark: int
    counts: dict[str, int]
    seconds: float
    # where the batch's time went: "step" (the stateful plan, run by the summary action),
    # "tables" (route/history/side-table commits), "progress" (the progress row's commit)
    phases: dict[str, float] = field(default_factory=dict)


@contextmanager
def _idempotent(spark: SparkSession, app_id: str, batch_id: int):
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)


class DeltaRouteWriter:
    """Call as a foreachBatch function."""

    def __init__(self, warehouse: str, app_id: str, watermark_of_batch, on_batch=None):
        self.warehouse = warehouse
        self.app_id = app_id
        self.watermark_of_batch = watermark_of_batch  # batch id -> watermark its tables show
        self.on_batch = on_batch  # callback(BatchReport), for metrics and logs

    def path(self, table: str) -> str:
        return storage.join(self.warehouse, table)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        batch = batch.persist()
        try:
            # One Spark action for the plan: rows per (kind, table), and the small stats rows.
            summary = (
                batch.groupBy("kind", "table")
                .agg(
                    F.count("*").alias("n"),
                    F.collect_list(F.when(F.col("kind") == "stats", F.col("row_json"))).alias(
                        "stats"
                    ),
                )
                .collect()
            )
            stepped = time.monotonic()
            per_table = {(r["kind"], r["table"]): r["n"] for r in summary}
            counts = _sum_stats(text for r in summary for text in r["stats"])
            writes = [
                partial(self._merge, spark, batch, t)
                for t in ROUTE_TABLES
                if ("change", t) in per_table
            ]
            writes += [
                partial(self._merge_history, spark, batch, t)
                for t in HISTORY_TABLES
                if ("history", t) in per_table
            ]
            writes += [
                partial(self._append, batch.filter(F.col("kind") == kind), table)
                for kind, table in (("dead", DEAD_LETTER), ("late", LATE_EVENT))
                if (kind, table) in per_table
            ]
            watermark = self.watermark_of_batch(batch_id)
            with _idempotent(spark, self.app_id, batch_id):
                # Tables are independent Delta logs: commit them concurrently (Spark runs
                # jobs from several threads), then publish the batch's progress row last.
                with ThreadPoolExecutor(max_workers=4) as pool:
                    for future in [pool.submit(write) for write in writes]:
                        future.result()
                written = time.monotonic()
                self._append_progress(spark, batch_id, watermark, counts)
        finally:
            batch.unpersist()
        finished = time.monotonic()
        report = BatchReport(
            batch_id,
            watermark,
            counts,
            finished - started,
            {
                "step": stepped - started,
                "tables": written - stepped,
                "progress": finished - written,
            },
        )
        if self.on_batch:
            self.on_batch(report)

    def _merge(self, spark: SparkSession, batch: DataFrame, table: str) -> None:
        schema = TABLE_DDL[table]
        changes = _exploded(
            batch.filter((F.col("kind") == "change") & (F.col("table") == table)), schema
        )
        keys = TABLE_KEYS[table]
        view = f"routelake_changes_{table}"
        changes.createOrReplaceTempView(view)
        columns = column_names(schema)
        on = " AND ".join(f"t.{k} <=> s.{k}" for k in keys)
        assign = ", ".join(f"t.{c} = s.{c}" for c in columns)
        insert_cols = ", ".join(columns)
        insert_vals = ", ".join(f"s.{c}" for c in columns)
        spark.sql(f"""
            MERGE INTO delta.`{self.path(table)}` t USING {view} s ON {on}
            WHEN MATCHED AND s.op = 'delete' THEN DELETE
            WHEN MATCHED THEN UPDATE SET {assign}
            WHEN NOT MATCHED AND s.op = 'upsert' THEN INSERT ({insert_cols}) VALUES ({insert_vals})
        """)

    def _merge_history(self, spark: SparkSession, batch: DataFrame, table: str) -> None:
        """Insert opened intervals, close them later by identity (valid_from stays fixed)."""
        ddl = HISTORY_TABLE_DDL[table]
        changes = _exploded(
            batch.filter((F.col("kind") == "history") & (F.col("table") == table)), ddl
        )
        view = f"routelake_changes_{table}"
        changes.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{c} = s.{c}" for c in ("event_date", *HISTORY_IDENTITY[table]))
        columns = column_names(ddl)
        insert = f"INSERT ({', '.join(columns)}) VALUES ({', '.join(f's.{c}' for c in columns)})"
        close = ", ".join(f"t.{c} = s.{c}" for c in HISTORY_CLOSE_COLUMNS.get(table, ()))
        clauses = [f"WHEN NOT MATCHED AND s.op IN ('upsert', 'append') THEN {insert}"]
        if table in HISTORY_CLOSE_COLUMNS:
            clauses = [
                "WHEN MATCHED AND s.op = 'delete' THEN DELETE",
                f"WHEN MATCHED AND s.op = 'close' THEN UPDATE SET {close}",
                "WHEN MATCHED AND s.op = 'upsert' THEN UPDATE SET "
                + ", ".join(f"t.{c} = s.{c}" for c in columns),
                *clauses,
            ]
        spark.sql(
            f"MERGE INTO delta.`{self.path(table)}` t USING {view} s ON {on} " + " ".join(clauses)
        )

    def _append(self, rows: DataFrame, table: str) -> None:
        ddl = SIDE_TABLE_DDL[table]
        parsed = rows.select(F.from_json("row_json", ddl).alias("r"), F.col("raw").alias("_raw"))
        # Raw bytes travel in their own binary column (JSON cannot carry them).
        out = parsed.select(
            *[
                (F.col("_raw") if c == "raw" else F.col(f"r.{c}")).alias(c)
                for c in column_names(ddl)
            ]
        )
        out.write.format("delta").mode("append").save(self.path(table))

    def _append_progress(
        self, spark: SparkSession, batch_id: int, watermark: int, counts: dict[str, int]
    ) -> None:
        names = column_names(SIDE_TABLE_DDL[PROGRESS])
        values = {
            "batch_id": batch_id,
            "watermark": watermark,
            "committed_at_ms": int(time.time() * 1000),
        }
        row = tuple(values.get(n, counts.get(n, 0)) for n in names)
        (
            spark.createDataFrame([row], SIDE_TABLE_DDL[PROGRESS])
            .write.format("delta")
            .mode("append")
            .save(self.path(PROGRESS))
        )


def _exploded(bundles: DataFrame, ddl: str) -> DataFrame:
    """(op, JSON array of rows) bundles -> one (op, columns...) row per array element."""
    rows = T.ArrayType(T.StructType.fromDDL(ddl))
    return bundles.select("op", F.explode(F.from_json("row_json", rows)).alias("r")).select(
        "op", "r.*"
    )


def _sum_stats(stats_json) -> dict[str, int]:
    totals: dict[str, int] = {}
    for text in stats_json:
        for name, value in json.loads(text).items():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


def column_names(ddl: str) -> list[str]:
    """Top-level column names of a DDL string."""
    return [c.split()[0] for c in ddl_columns(ddl)]
