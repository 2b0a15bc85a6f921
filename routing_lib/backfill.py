"""Backfill: archived events -> the same streaming pipeline, run with Trigger.AvailableNow."""

from __future__ import annotations

from pathlib import Path

from routing_lib.config import Config
from routing_lib.core.group_routes import RouteFlags
from routing_lib.spark.pipeline import JobSettings, start_query
from routing_lib.spark.session import build_spark
from routing_lib.spark.sources import CLOCK_FILE, archive_stream


def default_checkpoint(warehouse: str) -> str:
    """Backfills keep their checkpoint in the warehouse: a re-run over the same input is a no-op."""
    return str(Path(warehouse) / "_checkpoints" / "backfill")


def run_backfill(
    config: Config,
    inputs: list[str],
    warehouse: str,
    as_of: int | None = None,
    checkpoint: str | None = None,
    max_files_per_trigger: int | None = None,
    spark=None,
) -> None:
    missing = [p for p in inputs if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    checkpoint = checkpoint or default_checkpoint(warehouse)
    spark = spark or build_spark(config, "routelake-backfill")
    paths = [str(Path(p).resolve()) for p in inputs]
    delay = config.routes.watermark_delay_ms
    if as_of is not None:
        # One tick at as_of + delay carries Spark's watermark up to as_of even when the
        # archive ends earlier; groups never move their clocks past as_of.
        tick_dir = Path(checkpoint) / "as-of" / str(as_of)
        tick_dir.mkdir(parents=True, exist_ok=True)
        (tick_dir / CLOCK_FILE).write_text(str(as_of + delay))
        paths.append(str(tick_dir / CLOCK_FILE))
    settings = JobSettings(
        warehouse=str(Path(warehouse).resolve()),
        checkpoint=str(Path(checkpoint).resolve()),
        watermark_delay_ms=delay,
        flags=RouteFlags(config.routes.delete_topic_with_broker_registration),
        history=config.routes.history,
        as_of=as_of,
    )
    classified = archive_stream(spark, paths, max_files_per_trigger, settings.warehouse)
    query = start_query(spark, classified, settings, available_now=True)
    query.awaitTermination()
