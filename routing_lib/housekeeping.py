"""Warehouse housekeeping with delta-rs (no JVM): OPTIMIZE (bin-packing compaction) and
VACUUM of every routelake table.

    routectl housekeeping [--warehouse DIR] [--vacuum-hours H] [--dry-run]
        [--disable-retention-check] [--lite] [--since YYYY-MM-DD] [--before YYYY-MM-DD]
        [--table T]...

Each micro-batch commits a few small files per table, so tables accumulate many small
files; OPTIMIZE rewrites them into few large ones (a dataChange=false commit: readers, the
change feed and as-of results see the same rows). The files it replaces stay on disk until
VACUUM deletes files unreferenced for longer than the retention (default 168 h = Delta's
default delta.deletedFileRetentionDuration): by default like Spark's VACUUM, every such file
including old change-feed files (_change_data/) and leftovers of failed writes; with --lite
only files the log marks as removed. A shorter retention needs
--disable-retention-check, the delta-rs counterpart of Spark's
spark.databricks.delta.retentionDurationCheck.enabled=false. History tables are partitioned
by event_date, so --since/--before limit their compaction to a range of days.
See docs/housekeeping.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing_lib import storage
from routing_lib.config import Config
from routing_lib.core.catalog import STORED_NAMES, TABLES

DEFAULT_VACUUM_HOURS = 168
# every stored table of the catalog, in its order (a derived one has no files)
WAREHOUSE_TABLES: tuple[str, ...] = STORED_NAMES


@dataclass
class TableReport:
    table: str
    files_before: int = 0  # data files of the current version
    files_after: int = 0
    compaction: dict[str, Any] = field(default_factory=dict)  # delta-rs optimize metrics
    vacuumed: list[str] = field(default_factory=list)  # deleted (dry run: to be deleted)
    skipped: str | None = None  # why the table was not touched
    error: str | None = None

    def line(self, dry_run: bool) -> str:
        if self.skipped or self.error:
            return f"{self.table}: {'ERROR ' + self.error if self.error else self.skipped}"
        if dry_run:
            return (
                f"{self.table}: {self.files_before} files; vacuum would delete {len(self.vacuumed)}"
            )
        return (
            f"{self.table}: {self.files_before} -> {self.files_after} files "
            f"(+{self.compaction.get('numFilesAdded', 0)} "
            f"-{self.compaction.get('numFilesRemoved', 0)}); "
            f"vacuum deleted {len(self.vacuumed)}"
        )


def partition_filters(
    table: str, since: str | None, before: str | None
) -> list[tuple[str, str, str]] | None:
    """delta-rs partition filters restricting a history table to event_date in
    [since, before) (dates as 'YYYY-MM-DD' strings, like the partition values); None for a
    table not partitioned by day (the group-partitioned route tables compact whole)."""
    spec = TABLES.get(table)
    if spec is None or spec.partition_by != ("event_date",):  # by day: the history tables
        return None
    (column,) = spec.partition_by
    filters = [(column, ">=", since)] if since else []
    filters += [(column, "<", before)] if before else []
    return filters or None


def housekeep_table(
    path: str | Path,
    vacuum_hours: int,
    dry_run: bool = False,
    disable_retention_check: bool = False,
    lite: bool = False,
    filters: list[tuple[str, str, str]] | None = None,
) -> TableReport:
    path = str(path)
    report = TableReport(path.rstrip("/").rsplit("/", 1)[-1])
    if not storage.is_dir(storage.join(path, "_delta_log")):
        report.skipped = "no Delta table here (skipped)"
        return report
    try:
        table = storage.open_delta(path)
        report.files_before = len(table.file_uris())
        if not dry_run:
            report.compaction = table.optimize.compact(partition_filters=filters)
            table.update_incremental()
        report.files_after = len(table.file_uris())
        # delta-rs lists every expired tombstone, also files an earlier VACUUM already
        # deleted (they stay in the log until log cleanup): report the ones still on disk.
        vacuum = functools.partial(
            table.vacuum,
            retention_hours=vacuum_hours,
            full=not lite,
            enforce_retention_duration=not disable_retention_check,
        )
        expired = vacuum(dry_run=True)
        report.vacuumed = [f for f in expired if storage.exists(_data_file(path, f))]
        if report.vacuumed and not dry_run:
            vacuum(dry_run=False)
    except Exception as exc:  # one table's failure must not stop the others
        report.error = f"{type(exc).__name__}: {exc}"
    return report


def _data_file(table: str, name: str) -> str:
    """A file VACUUM lists (relative to the table, or a file:// URI) as a location."""
    if name.startswith("file://"):
        return name.removeprefix("file://")
    return name if "://" in name else storage.join(table, name)


def housekeep(
    warehouse: str | Path,
    vacuum_hours: int = DEFAULT_VACUUM_HOURS,
    dry_run: bool = False,
    disable_retention_check: bool = False,
    lite: bool = False,
    since: str | None = None,
    before: str | None = None,
    tables: tuple[str, ...] = WAREHOUSE_TABLES,
) -> list[TableReport]:
    """OPTIMIZE then VACUUM each table of the warehouse; one report per table."""
    if vacuum_hours < 0:
        raise ValueError("--vacuum-hours must be >= 0")
    if vacuum_hours < DEFAULT_VACUUM_HOURS and not disable_retention_check:
        raise ValueError(
            f"a VACUUM retention of {vacuum_hours} h is below {DEFAULT_VACUUM_HOURS} h: readers "
            "still on older versions (change feed consumers, a restarting job) would lose "
            "files; pass --disable-retention-check if you are sure"
        )
    root = str(warehouse)
    if not storage.is_dir(root):
        raise FileNotFoundError(f"warehouse {root} does not exist")
    return [
        housekeep_table(
            storage.join(root, t),
            vacuum_hours,
            dry_run,
            disable_retention_check,
            lite,
            partition_filters(t, since, before),
        )
        for t in tables
    ]


def run(args: argparse.Namespace, config: Config) -> int:
    """`routectl housekeeping` (its options: routing_lib/cli/housekeeping.py): a line per
    table; exit 2 when the request is refused, 1 when a table failed."""
    if getattr(args, "content", False):
        return run_content(args, config)
    warehouse = storage.resolve(args.warehouse or config.paths.warehouse)
    try:
        reports = housekeep(
            warehouse,
            DEFAULT_VACUUM_HOURS if args.vacuum_hours is None else args.vacuum_hours,
            args.dry_run,
            args.disable_retention_check,
            args.lite,
            args.since,
            args.before,
            tuple(args.table) if args.table else WAREHOUSE_TABLES,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        print(report.line(args.dry_run))
    return 1 if any(r.error for r in reports) else 0


def run_content(args: argparse.Namespace, config: Config) -> int:
    """`routectl housekeeping --content`: collect the checkpoint's content store
    (routing_lib/content_gc.py) with a local Spark session; exit 2 when refused."""
    from routing_lib.content_gc import (
        CollectionRefused,
        check_grace,
        collect_content,
        require_state,
    )
    from routing_lib.spark.session import build_spark

    checkpoint = storage.resolve(args.checkpoint or config.paths.checkpoint)
    grace = (
        config.spark.content_gc_grace_s if args.content_grace_s is None else args.content_grace_s
    )
    try:
        check_grace(grace)
        require_state(checkpoint)  # before a Spark session is started for nothing
    except (ValueError, CollectionRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = build_spark(config, "routelake-housekeeping")
    try:
        report = collect_content(spark, checkpoint, grace, args.dry_run)
    except CollectionRefused as exc:  # the state folder went meanwhile
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(report.line(args.dry_run))
    return 0
