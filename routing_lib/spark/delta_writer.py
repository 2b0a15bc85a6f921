"""foreachBatch sink: one idempotent Delta commit per table per micro-batch.

Route tables get a MERGE of the batch's row changes (topic_base restricted to the touched
groups' partitions; a name no Hive folder can hold: those partitions replaced by
routing_lib/spark/group_files.py); history tables an insert by identity; dead letters and
late events are appended. Then topic_queue_table is derived for the groups whose topic_base
or topic_overlay rows changed (routing_lib/spark/derived_topic_queue.py: their partitions
replaced from what the two tables hold now), and the progress row is committed last.

Spark computes the batch (the stateful plan) and one action brings its rows to the driver,
where each table's rows are parsed in Arrow (routing_lib/spark/batch_rows.py); delta-rs
commits them from the driver: a Spark MERGE of a small micro-batch took ~0.4 s of
job scheduling and log work on 2 cores, a delta-rs one tens of ms, and every batch's fixed
cost delays when its routes are visible. Every commit carries a txn
action (appId, version = batch id), and a table that has the batch's version already is
skipped: a batch replayed after a crash writes nothing twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.table import TableMerger
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from routing_lib import storage
from routing_lib.core.catalog import (
    BROKER_LIVENESS_EVENTS,
    DEAD_LETTER,
    PROGRESS,
    STORED,
    TOPIC_BASE,
    TOPIC_OVERLAY,
    TOPIC_QUEUE,
    TableSpec,
    WriteMode,
)
from routing_lib.core.history import EXPIRED
from routing_lib.core.rows import WRITES, RowKind, RowOp
from routing_lib.layout import require_group_layout
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.spark.batch_rows import BatchRows
from routing_lib.spark.derived_topic_queue import apply_base_changes, derive_partitions
from routing_lib.spark.group_files import groups_predicate, hive_safe, replace_groups

log = logging.getLogger("routelake.writer")
# The tables whose rows the step emits (route_progress and topic_queue_table: the writer
# makes their rows).
STEP_TABLES: tuple[tuple[RowKind, TableSpec], ...] = tuple(
    (spec.row_kind, spec) for spec in STORED if spec.row_kind is not None
)
# The group layout's route tables: a change of either touches the group's topic_queue_table
# partition.
GROUP_TABLES = frozenset({TOPIC_BASE, TOPIC_OVERLAY})


# The rows of an append handed to delta-rs at a time.
_APPEND_BATCH_ROWS = 64 * 1024

# Every stored table has its change data feed on (the lookup and the history read it).
CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}


def ensure_tables(warehouse: str) -> None:
    """Create every stored table (Change Data Feed on) that does not exist yet.

    delta-rs commits each table's version 0 from the driver (put-if-absent, like the job's
    other commits): a Spark CREATE TABLE per table cost the backfill of a new warehouse
    ~0.3-1 s each, 17 of them, before its first batch (a few seconds of a 20 s backfill).
    The schema is the catalog's as Spark would have created it (routing_lib/read/arrow_schema.py:
    every column nullable, INT 32 bit); the protocol is delta-rs's (reader 1, writer 4: the
    change data feed), which Spark reads and writes as well."""
    require_group_layout(warehouse)  # never the group layout's tables beside per-topic ones
    for spec in STORED:
        path = storage.join(warehouse, spec.name)  # a folder or an s3a:// URI
        if storage.is_dir(storage.join(path, "_delta_log")):
            continue
        DeltaTable.create(
            storage.delta_uri(path),
            arrow_schema(spec),
            mode="ignore",  # created meanwhile by another process: that one stands
            partition_by=list(spec.partition_by) or None,
            configuration=CHANGE_DATA_FEED,
            storage_options=storage.delta_storage_options(path),
        )


@dataclass
class BatchReport:
    batch_id: int
    watermark: int
    counts: dict[str, int]
    seconds: float
    # where the batch's time went: "step" (the stateful plan, run by the stats action),
    # "tables" (route/history/side-table commits), "progress" (the progress row's commit)
    phases: dict[str, float] = field(default_factory=dict)
    # the dead letters written, by reason (for the job's metrics)
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    # EXPIRED rows written to broker_liveness_events, by (cluster, broker name); None when the
    # batch has no liveness rows to write (the job writes no history, or nothing happened).
    # A replayed batch whose rows are in already counts nothing again.
    broker_expiries: dict[tuple[str, str], int] | None = None
    # inside "tables", per table: "<table> parse" (its rows from the batch's JSON bundles)
    # and "<table> commit" (delta-rs); the writes run concurrently, so these overlap and may
    # add up to more than "tables"; "topic_queue_table derive"
    table_seconds: dict[str, float] = field(default_factory=dict)


class DeltaRouteWriter:
    """Call as a foreachBatch function."""

    def __init__(
        self,
        warehouse: str,
        app_id: str,
        watermark_of_batch: Callable[[int], int],
        on_batch: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.warehouse = warehouse
        self.app_id = app_id
        self.watermark_of_batch = watermark_of_batch  # batch id -> watermark its tables show
        self.on_batch = on_batch  # callback(BatchReport), for metrics and logs
        self._dead_letter_reasons: dict[str, int] = {}  # this batch's, read as they are written
        self.broker_expiries: dict[tuple[str, str], int] | None = None  # idem
        self._table_seconds: dict[str, float] = {}  # idem
        # (batch id, rows): the topic_base partitions a batch's commit wrote whole (new
        # groups, or groups whose names no Hive folder holds), handed to the derivation
        # of topic_queue_table instead of reading them back
        self._written_base: tuple[int, pa.Table] | None = None

    def path(self, table: str) -> str:
        return storage.join(self.warehouse, table)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self._dead_letter_reasons = {}
        self.broker_expiries = None
        self._table_seconds = {}
        # One Spark action runs the plan and brings every output row to the driver; the
        # stats rows (one per step call) say what each call counted and which tables its
        # other rows go to.
        rows = BatchRows.collect(batch)
        stepped = time.monotonic()
        counts, per_table = _read_stats(rows.stats_json())
        if (RowKind.HISTORY, BROKER_LIVENESS_EVENTS) in per_table:
            self.broker_expiries = {}  # filled by merge_rows if it writes them
        writes = [
            partial(self._write, rows, batch_id, kind, spec)
            for kind, spec in STEP_TABLES
            if (kind, spec.name) in per_table
        ]
        watermark = self.watermark_of_batch(batch_id)
        # Tables are independent Delta logs: commit them concurrently (Arrow parsing and
        # delta-rs release the GIL), then derive topic_queue_table from the committed
        # topic_base / topic_overlay, then publish the batch's progress row last.
        touched: set[str] = set()
        with ThreadPoolExecutor(max_workers=4) as pool:
            for future in [pool.submit(write) for write in writes]:
                touched |= future.result()
        derive_started = time.monotonic()
        self.derive_topic_queue(batch_id, touched)
        self._spent(f"{TOPIC_QUEUE} derive", derive_started)
        written = time.monotonic()
        self.append_progress(batch_id, watermark, counts)
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
            self._dead_letter_reasons,
            self.broker_expiries,
            self._table_seconds,
        )
        if self.on_batch:
            self.on_batch(report)

    def _write(self, rows: BatchRows, batch_id: int, kind: RowKind, spec: TableSpec) -> set[str]:
        """Commit one table's rows of the batch the way the catalog says; the groups whose
        topic_base or topic_overlay rows it holds."""
        started = time.monotonic()
        if spec.write_mode is WriteMode.APPEND:
            self._append(rows.of_kind(kind), batch_id, spec)
            self._spent(f"{spec.name} commit", started)
            return set()

        def table_rows() -> pa.Table:
            parse_started = time.monotonic()
            parsed = rows.table_rows(kind, spec)
            self._spent(f"{spec.name} parse", parse_started)
            return parsed

        touched = self.merge_rows(batch_id, spec, table_rows)
        parse = self._table_seconds.get(f"{spec.name} parse", 0.0)
        self._table_seconds[f"{spec.name} commit"] = time.monotonic() - started - parse
        return touched

    def _spent(self, name: str, since: float) -> None:
        """Record a part of the batch's table work (each name is written by one thread)."""
        self._table_seconds[name] = self._table_seconds.get(name, 0.0) + time.monotonic() - since

    def derive_topic_queue(self, batch_id: int, groups: set[str]) -> None:
        """Replace the touched groups' topic_queue_table partitions with what topic_base and
        topic_overlay hold now, unless this batch's commit is in already (a replay)."""
        if not groups:
            return
        target = self._unless_written(TOPIC_QUEUE, batch_id)
        if target is None:
            return
        written, self._written_base = self._written_base, None
        derive_partitions(
            storage.open_delta(self.path(TOPIC_BASE)),
            storage.open_delta(self.path(TOPIC_OVERLAY)),
            target,
            self.path(TOPIC_QUEUE),
            groups,
            self._commit(batch_id),
            written[1] if written is not None and written[0] == batch_id else None,
        )

    def merge_rows(self, batch_id: int, spec: TableSpec, rows: Callable[[], pa.Table]) -> set[str]:
        """MERGE one table's row changes of batch `batch_id` with delta-rs, unless the table
        has this batch already. `rows()` gives them as Arrow, op + the table's columns; it is
        called only when they are to be written (a replayed batch skips Spark's collect).
        Spark-free: the job passes its Spark rows' toArrow, tests their own Arrow rows. From the
        driver, a small MERGE costs tens of ms instead of a Spark MERGE's several jobs (~0.4 s).
        Returns the groups a topic_base or topic_overlay change touches (read also when the
        batch is in already: a replay derives their topic_queue_table partitions again)."""
        touched: set[str] = set()
        if spec.name in GROUP_TABLES:
            collected = rows()
            touched = {str(g) for g in pc.unique(collected.column("broker_name")).to_pylist()}

            def rows() -> pa.Table:  # collected once
                return collected

        target = self._unless_written(spec.name, batch_id)
        if target is None:
            return touched
        commit = self._commit(batch_id)
        if spec.name == TOPIC_BASE and not all(map(hive_safe, touched)):
            # a name no Hive folder can hold: its files placed by the writer
            # (spark/group_files.py; the change feed then comes from the files added and
            # removed, the whole partition, instead of a MERGE's change data)
            written = apply_base_changes(target, self.path(TOPIC_BASE), rows(), commit)
            self._written_base = (batch_id, written)
            return touched
        schema = pa.schema(target.schema().to_arrow())
        source = (
            rows().select(["op", *schema.names]).cast(schema.insert(0, pa.field("op", pa.string())))
        )
        if spec.name == BROKER_LIVENESS_EVENTS:  # the rows are on the driver: count expiries
            self._count_expiries(source)
        inserts = _inserted(spec, source)
        if inserts.num_rows and _new_partitions(target, spec, source):
            # No row of the target can match: a MERGE would insert `inserts` and nothing
            # else, so an append does (its change feed: the files added, the same rows). A
            # cold start's 3 M topic_base and topic_base_changes rows come this way.
            if spec.name == TOPIC_BASE:
                # New groups: each one's file written at once (spark/group_files.py), one
                # commit of their adds. delta-rs's partitioned append kept every partition's
                # encoded rows until its commit: ~2 MB more per 10 000-topic group.
                replace_groups(target, self.path(TOPIC_BASE), touched, inserts, commit)
                self._written_base = (batch_id, inserts)  # the groups' partitions, whole
                return touched
            # in record batches: delta-rs then holds one batch's copies, not the table's
            # (a synthetic append of 2 M rows to one partition: +450 -> +200 MB of RSS; its
            # file buffer, which its target file size bounds, is most of what is left)
            data = inserts.to_reader(max_chunksize=_APPEND_BATCH_ROWS)
            write_deltalake(target, data, mode="append", commit_properties=commit)
            return touched
        merge = target.merge(
            source,
            _merge_condition(spec, touched),
            source_alias="s",
            target_alias="t",
            # the source is in memory already: let delta-rs use its min/max to skip target
            # files (one run each, 10 000-topic backfill: 36.0 -> 33.3 s)
            streamed_exec=False,
            commit_properties=commit,
        )
        _merge_clauses(spec, merge).execute()
        return touched

    def _count_expiries(self, liveness: pa.Table) -> None:
        """Add the EXPIRED rows being written to broker_expiries, by (cluster, broker name)."""
        expiries = self.broker_expiries if self.broker_expiries is not None else {}
        for op, event_type, cluster, broker in zip(
            liveness.column("op").to_pylist(),
            liveness.column("event_type").to_pylist(),
            liveness.column("cluster_name").to_pylist(),
            liveness.column("broker_name").to_pylist(),
            strict=True,
        ):
            if event_type == EXPIRED and op != RowOp.DELETE.value:
                key = (str(cluster or ""), str(broker or ""))
                expiries[key] = expiries.get(key, 0) + 1
        self.broker_expiries = expiries

    def _unless_written(self, table: str, batch_id: int) -> DeltaTable | None:
        """The table to commit the batch to, or None when a commit of this batch (a replay
        after a crash) is in already."""
        target = storage.open_delta(self.path(table))
        written = target.transaction_version(self.app_id)  # None: no batch of ours yet
        if written is not None and written >= batch_id:  # batch 0 is a batch: test for None
            return None
        return target

    def _commit(self, batch_id: int) -> CommitProperties:
        """The txn action (appId, batch id) that marks a commit as this batch's."""
        return CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)])

    def _append(self, rows: DataFrame, batch_id: int, spec: TableSpec) -> None:
        parsed = rows.select(
            F.from_json("row_json", spec.ddl).alias("r"), F.col("raw").alias("_raw")
        )
        # Raw bytes travel in their own binary column (JSON cannot carry them).
        out = parsed.select(
            *[
                (F.col("_raw") if c == "raw" else F.col(f"r.{c}")).alias(c)
                for c in spec.column_names
            ]
        )
        target = self._unless_written(spec.name, batch_id)
        if target is None:
            if spec.name == DEAD_LETTER:
                # A replayed batch's dead letters are in already, but this process counts the
                # batch again (its stats say how many): read their reasons all the same.
                self._count_reasons(parsed.select("r.reason").toArrow().column("reason"))
            return
        rows_out = out.toArrow()
        if spec.name == DEAD_LETTER:  # the rows are on the driver already: count them here
            self._count_reasons(rows_out.column("reason"))
        write_deltalake(
            target,
            rows_out.cast(pa.schema(target.schema().to_arrow())),
            mode="append",
            commit_properties=self._commit(batch_id),
        )

    def _count_reasons(self, reasons: pa.ChunkedArray) -> None:
        for reason in reasons.to_pylist():
            key = str(reason)
            self._dead_letter_reasons[key] = self._dead_letter_reasons.get(key, 0) + 1

    def append_progress(self, batch_id: int, watermark: int, counts: dict[str, int]) -> None:
        """The batch's progress row, committed by delta-rs from the driver: a one-row append
        costs ~10 ms here against ~0.5 s as a Spark job. The same txn action makes
        it idempotent: a replayed batch whose row is in already writes nothing."""
        table = self._unless_written(PROGRESS, batch_id)
        if table is None:
            return
        values = {
            "batch_id": batch_id,
            "watermark": watermark,
            "committed_at_ms": int(time.time() * 1000),
        }
        schema = pa.schema(table.schema().to_arrow())
        row = pa.Table.from_pylist(
            [{n: values.get(n, counts.get(n, 0)) for n in schema.names}], schema=schema
        )
        write_deltalake(
            table,
            row,
            mode="append",
            commit_properties=self._commit(batch_id),
        )


def _merge_condition(spec: TableSpec, groups: set[str] | None = None) -> str:
    """A route table's rows match by key (null-safe, as a key column may be null), a history
    table's by identity, event_date first (partition pruning). A table partitioned by group
    (topic_base) is restricted to the touched groups' partitions: no other file is read."""
    if not spec.identity:
        by_key = " AND ".join(f'(t."{k}" IS NOT DISTINCT FROM s."{k}")' for k in spec.keys)
        if spec.partition_by == ("broker_name",) and groups:
            return f"t.{groups_predicate(groups)} AND {by_key}"
        return by_key
    identity = (*spec.partition_by, *spec.identity)
    return " AND ".join(f't."{c}" = s."{c}"' for c in identity)


def _insert_ops(spec: TableSpec) -> tuple[RowOp, ...]:
    """The ops whose rows a MERGE inserts when no target row matches (_merge_clauses)."""
    return (RowOp.UPSERT, RowOp.APPEND) if spec.identity else (RowOp.UPSERT,)


def _inserted(spec: TableSpec, source: pa.Table) -> pa.Table:
    """The rows a MERGE of `source` (op + columns) inserts into a target none of them match."""
    ops = pa.array([op.value for op in _insert_ops(spec)], pa.string())
    inserted = pc.is_in(source.column("op"), value_set=ops)
    if pc.all(inserted, skip_nulls=False).as_py():  # a cold start's: no copy of millions
        return source.drop_columns(["op"])
    return source.filter(inserted).drop_columns(["op"])


def _new_partitions(target: DeltaTable, spec: TableSpec, source: pa.Table) -> bool:
    """Whether the target holds no file in any partition the rows go to (an unpartitioned
    table: no file at all), so that no row of it can match them: every MERGE condition
    includes the partition column (_merge_condition)."""
    files = pa.table(target.get_add_actions(flatten=True))
    if files.num_rows == 0:
        return True
    if len(spec.partition_by) != 1:
        return False
    (column,) = spec.partition_by
    held = files.column(f"partition.{column}")
    return not pc.any(pc.is_in(held, value_set=pc.unique(source.column(column)))).as_py()


def _merge_clauses(spec: TableSpec, merge: TableMerger) -> TableMerger:
    """Route tables: upserts and deletes by key. History tables: opened intervals and events
    inserted, intervals closed later by identity (valid_from stays fixed)."""
    every = _from_source(spec.column_names)
    if not spec.identity:
        return (
            merge.when_matched_delete(_op_is(RowOp.DELETE))
            .when_matched_update(every)
            .when_not_matched_insert(every, _op_is(RowOp.UPSERT))
        )
    if spec.close_columns:  # an interval table
        merge = (
            merge.when_matched_delete(_op_is(RowOp.DELETE))
            .when_matched_update(_from_source(spec.close_columns), _op_is(RowOp.CLOSE))
            .when_matched_update(every, _op_is(RowOp.UPSERT))
        )
    return merge.when_not_matched_insert(every, _op_is(RowOp.UPSERT, RowOp.APPEND))


def _from_source(columns: Iterable[str]) -> dict[str, str]:
    """delta-rs MERGE assignments: each target column set to the source's (quoted names)."""
    return {f'"{c}"': f's."{c}"' for c in columns}


def _op_is(*ops: RowOp) -> str:
    """A MERGE predicate on the source row's op."""
    return "s.op IN ({})".format(", ".join(f"'{op.value}'" for op in ops))


def _read_stats(stats_json: Iterable[str]) -> tuple[dict[str, int], set[tuple[RowKind, str]]]:
    """Summed counts of the stats rows, and the (kind, table) pairs they list."""
    totals: dict[str, int] = {}
    writes: set[tuple[RowKind, str]] = set()
    for text in stats_json:
        for name, value in json.loads(text).items():
            if name == WRITES:
                for write in value:
                    kind, _, table = write.partition("/")
                    writes.add((RowKind(kind), table))
            else:
                totals[name] = totals.get(name, 0) + int(value)
    return totals, writes
