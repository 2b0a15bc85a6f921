"""Assemble and start the streaming query: classified records -> per-group step -> Delta."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupStateTimeout

from routing_lib.config import SparkConfig
from routing_lib.content_files import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BACKOFF_S,
    ContentSettings,
    content_settings,
)
from routing_lib.core.group_routes import RouteFlags
from routing_lib.spark.checkpoint import batch_watermark, ensure_watermark_lead
from routing_lib.spark.delta_writer import BatchReport, DeltaRouteWriter, ensure_tables
from routing_lib.spark.stateful import OUTPUT_SCHEMA, STATE_SCHEMA, StepSettings, make_step
from routing_lib.spark.stop_interruption import stop_interruptible
from routing_lib.spark.watermark import spark_event_time
from routing_lib.storage import is_remote

log = logging.getLogger("routelake.pipeline")

# Spark drops rows older than the watermark before an event-time-timeout state function sees
# them (Spark 4.0). The contract needs them: a row between the previous and the current
# watermark is not late and must be applied in order. So the watermark is computed on a column
# of its own (eventTime + 1: routing_lib/spark/watermark.py) that is dropped before the
# operator, and the operator is handed a stand-in watermark column that no row is older than.
_STAND_IN_EVENT_TIME = "2200-01-01 00:00:00"


@dataclass(frozen=True)
class ContentOptions:
    """How the job keeps large values, as one: [spark] content_min_chars (from which size a
    value goes to the content store), content_io_attempts and content_io_backoff_s (how
    hard a storage call is retried)."""

    min_chars: int = 4096
    io_attempts: int = DEFAULT_ATTEMPTS
    io_backoff_s: float = DEFAULT_BACKOFF_S

    @classmethod
    def of(cls, spark: SparkConfig) -> ContentOptions:
        return cls(spark.content_min_chars, spark.content_io_attempts, spark.content_io_backoff_s)

    def settings(self, checkpoint: str) -> ContentSettings:
        return content_settings(checkpoint, self.min_chars, self.io_attempts, self.io_backoff_s)


@dataclass(frozen=True)
class JobSettings:
    warehouse: str
    checkpoint: str
    watermark_delay_ms: int
    flags: RouteFlags = RouteFlags()
    as_of: int | None = None
    history: bool = True
    content_options: ContentOptions = ContentOptions()

    @property
    def content(self) -> ContentSettings:
        """Where stage one and the step keep large values: in the checkpoint, which they
        belong to (a new checkpoint starts a new store)."""
        return self.content_options.settings(self.checkpoint)


def route_changes(classified: DataFrame, settings: JobSettings) -> DataFrame:
    delay = settings.watermark_delay_ms
    watermarked = classified.withColumn(
        "event_ts", spark_event_time(F.col("event_time"))
    ).withWatermark("event_ts", f"{delay} milliseconds")
    stand_in = (
        F.lit(_STAND_IN_EVENT_TIME)
        .cast("timestamp")
        .alias("event_ts", metadata={"spark.watermarkDelayMs": delay})
    )
    step = make_step(
        StepSettings(
            settings.checkpoint,
            settings.flags,
            settings.as_of,
            settings.history,
            settings.warehouse,
            settings.content,
        )
    )
    return (
        watermarked.drop("event_ts")
        .withColumn("event_ts", stand_in)
        .groupBy("group_key")
        .applyInPandasWithState(
            step, OUTPUT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
        )
    )


def app_id_for(checkpoint: str) -> str:
    """A stable Delta txnAppId per checkpoint: a restarted query keeps it, a new one does not."""
    # an object-store URI is absolute already (Path would collapse its "//")
    where = checkpoint.rstrip("/") if is_remote(checkpoint) else str(Path(checkpoint).resolve())
    digest = hashlib.sha1(where.encode()).hexdigest()[:16]
    return f"routelake-{digest}"


def start_query(
    spark: SparkSession,
    classified: DataFrame,
    settings: JobSettings,
    available_now: bool,
    trigger_interval: str | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> StreamingQuery:
    ensure_tables(settings.warehouse)
    ensure_watermark_lead(settings.checkpoint, settings.warehouse)  # before any batch reads it

    def watermark_of_batch(batch_id: int) -> int:
        wm = batch_watermark(settings.checkpoint, batch_id)
        return wm if settings.as_of is None else min(wm, settings.as_of)

    writer = DeltaRouteWriter(
        settings.warehouse,
        app_id_for(settings.checkpoint),
        watermark_of_batch,
        on_batch or _log_batch,
    )
    stream = (
        route_changes(classified, settings)
        .writeStream.queryName("routelake")
        .option("checkpointLocation", settings.checkpoint)
        .foreachBatch(stop_interruptible(writer))
    )
    if available_now:
        stream = stream.trigger(availableNow=True)
    elif trigger_interval:
        stream = stream.trigger(processingTime=trigger_interval)
    return stream.start()


def _log_batch(report: BatchReport) -> None:
    log.info(
        "batch %d watermark %d %.2fs %s",
        report.batch_id,
        report.watermark,
        report.seconds,
        report.counts,
    )
