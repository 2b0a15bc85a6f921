"""The backfill: archived events -> the same streaming pipeline, run with Trigger.AvailableNow
(`routectl backfill`, `spark-submit jobs/backfill.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from routing_lib import storage
from routing_lib.config import Config
from routing_lib.core.group_routes import RouteFlags
from routing_lib.jobs import app_name
from routing_lib.spark.pipeline import ContentOptions, JobSettings, start_query
from routing_lib.spark.session import build_spark
from routing_lib.spark.sources import CLOCK_FILE, archive_stream
from routing_lib.spark.warm_workers import finish, start_python_workers


def default_checkpoint(warehouse: str) -> str:
    """Backfills keep their checkpoint in the warehouse: a re-run over the same input is a no-op."""
    return storage.join(warehouse, "_checkpoints", "backfill")


# Stage one's tasks per core: archive files are packed into tasks of up to 128 MB by default, so
# 16 files of 20 MB on 2 cores made 4 tasks (99, 108, 102, 13 MB) and one core waited through
# the last wave; ~4 per core keep both busy to the end.
_FILE_TASKS_PER_CORE = 4
_MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"


@contextmanager
def _balanced_file_tasks(spark: SparkSession) -> Iterator[None]:
    """While the query runs, cut the archive into about _FILE_TASKS_PER_CORE tasks per core
    (unless the session sets spark.sql.files.minPartitionNum itself). The file source plans
    each batch with the conf of the session that defined it (not the query's copy), so the
    setting stays for the run and is taken back after it."""
    if spark.conf.get(_MIN_PARTITION_NUM, None) is not None:
        yield
        return
    cores = spark.sparkContext.defaultParallelism
    spark.conf.set(_MIN_PARTITION_NUM, str(_FILE_TASKS_PER_CORE * cores))
    try:
        yield
    finally:
        spark.conf.unset(_MIN_PARTITION_NUM)


def _spark_location(location: str) -> str:
    """An absolute local path, or the s3a:// URI Spark writes to (docs/object-storage.md)."""
    return storage.spark_uri(location if storage.is_remote(location) else Path(location).resolve())


def run_backfill(
    config: Config,
    inputs: list[str],
    warehouse: str,
    as_of: int | None = None,
    checkpoint: str | None = None,
    max_files_per_trigger: int | None = None,
    spark: SparkSession | None = None,
    allow_future_events: bool | None = None,
) -> None:
    """`allow_future_events` (default: [routes] backfill_allow_future_events) keeps lines dated
    more than max_future_skew_ms ahead of the wall clock; else they are dead letters, so one
    line from year 9999 cannot carry the watermark there and expire every broker."""
    if allow_future_events is None:
        allow_future_events = config.routes.backfill_allow_future_events
    missing = [p for p in inputs if not storage.exists(p)]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    checkpoint = checkpoint or default_checkpoint(warehouse)
    spark = spark or build_spark(config, app_name("backfill"))
    # the Python workers start while the driver creates the tables and plans the first batch
    warming = start_python_workers(spark)
    paths = [_spark_location(p) for p in inputs]
    delay = config.routes.watermark_delay_ms
    if as_of is not None:
        # One tick at as_of + delay carries Spark's watermark up to as_of even when the
        # archive ends earlier; groups never move their clocks past as_of.
        tick = storage.join(checkpoint, "as-of", str(as_of), CLOCK_FILE)
        storage.write_text(tick, str(as_of + delay))
        paths.append(tick)
    settings = JobSettings(
        warehouse=_spark_location(warehouse),
        checkpoint=_spark_location(checkpoint),
        watermark_delay_ms=delay,
        flags=RouteFlags(config.routes.delete_topic_with_broker_registration),
        history=config.routes.history,
        as_of=as_of,
        content_options=ContentOptions.of(config.spark),
    )
    skew = None if allow_future_events else config.routes.max_future_skew_ms
    classified = archive_stream(
        spark, paths, max_files_per_trigger, settings.warehouse, skew, settings.content
    )
    try:
        with _balanced_file_tasks(spark):
            query = start_query(spark, classified, settings, available_now=True)
            query.awaitTermination()
    finally:
        finish(warming)
