"""A warehouse written by the job's own Delta writer, without Spark: the tables created with
Change Data Feed on, as the job creates them (routing_lib/spark/delta_writer.py
`ensure_tables`, delta-rs too), and each batch's rows committed by `DeltaRouteWriter.merge_rows`,
the delta-rs MERGE the job's foreachBatch runs, then its progress row by `append_progress`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from routing_lib.core.catalog import STORED, TableSpec, spec
from routing_lib.core.tables import Row
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.spark.delta_writer import DeltaRouteWriter

APP_ID = "writer-test"
# the TBLPROPERTIES of the writer's create_table_sql
CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}

Change = tuple[str, Row]  # (op: a RowOp value, the row: all columns, or the key for a delete)


def create_tables(root: Path, specs: Iterable[TableSpec] = STORED) -> None:
    for table in specs:
        DeltaTable.create(
            str(root / table.name),
            arrow_schema(table),
            partition_by=list(table.partition_by) or None,
            configuration=CHANGE_DATA_FEED,
        )


class WriterWarehouse:
    """Tables written batch by batch by a DeltaRouteWriter of `app_id`; `specs`: the tables
    to create first (none: they are there already)."""

    def __init__(
        self, root: Path, specs: Iterable[TableSpec] = STORED, app_id: str = APP_ID
    ) -> None:
        self.root = root
        self.watermarks: dict[int, int] = {}
        self.writer = DeltaRouteWriter(str(root), app_id, self.watermarks.__getitem__)
        create_tables(root, specs)

    def merge(self, table: str, changes: Iterable[Change], batch: int) -> set[str]:
        """One table's changes in batch `batch`, as the step hands them to the writer. A table
        without changes gets no commit, as in the job. The groups whose topic_base or
        topic_overlay rows changed."""
        schema = arrow_schema(table).insert(0, pa.field("op", pa.string()))
        rows = pa.Table.from_pylist([{**row, "op": op} for op, row in changes], schema=schema)
        if rows.num_rows:
            return self.writer.merge_rows(batch, spec(table), lambda: rows)
        return set()

    def progress(self, batch: int, watermark: int) -> None:
        self.watermarks[batch] = watermark
        self.writer.append_progress(batch, watermark, {})

    def publish(self, batch: int, watermark: int, changes: dict[str, list[Change]]) -> None:
        """The writer's order: every table's changes, then topic_queue_table derived for the
        groups whose topic_base / topic_overlay rows changed, then the progress row."""
        touched: set[str] = set()
        for table, table_changes in changes.items():
            touched |= self.merge(table, table_changes, batch)
        self.writer.derive_topic_queue(batch, touched)
        self.progress(batch, watermark)


def last_commit_files(table: Path) -> list[Path]:
    """The data and change-data files the table's latest commit added."""
    log = sorted((table / "_delta_log").glob("*.json"))[-1]
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    return [table / a[kind]["path"] for a in actions for kind in ("add", "cdc") if kind in a]
