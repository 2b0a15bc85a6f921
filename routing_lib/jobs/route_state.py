"""The streaming job `route_state`: Kafka -> the same pipeline as the backfill -> Delta
(`routectl run`, `spark-submit jobs/route_state.py`)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from routing_lib import storage
from routing_lib.config import Config
from routing_lib.core.group_routes import RouteFlags
from routing_lib.jobs import app_name
from routing_lib.metrics import JobMetrics, KafkaProbe, serve_metrics
from routing_lib.spark.delta_writer import BatchReport
from routing_lib.spark.failures import JobPlaces, StreamJobFailure, explain
from routing_lib.spark.pipeline import JobSettings, start_query
from routing_lib.spark.session import build_spark
from routing_lib.spark.sources import kafka_stream

log = logging.getLogger("routelake.route_state")


def run_route_state(
    config: Config,
    available_now: bool = False,
    metrics_port: int | None = None,
    stop_event: threading.Event | None = None,
    install_signal_handlers: bool = True,
) -> JobMetrics:
    """Run until stopped (SIGTERM, Ctrl-C, stop_event) or, with available_now, until caught up."""
    stop_event = stop_event or threading.Event()
    metrics = JobMetrics()
    probe: KafkaProbe | None = None
    if metrics_port:
        serve_metrics(metrics, metrics_port, config.serve.host)
        probe = KafkaProbe(config.kafka.bootstrap_servers, metrics).start()
    spark = build_spark(config, app_name("route_state"))
    from routing_lib.spark.progress_listener import ProgressListener

    listener = ProgressListener(metrics)
    spark.streams.addListener(listener)

    collect_due = threading.Event()  # set by the batch callback, run by the loop below
    every = config.spark.content_gc_every_batches
    if every > 0:
        from routing_lib.content_gc import check_grace

        check_grace(config.spark.content_gc_grace_s)  # refused before the query starts
    published = [0]

    def on_batch(report: BatchReport) -> None:
        published[0] += 1
        if every > 0 and published[0] % every == 0:
            collect_due.set()
        metrics.record_batch(
            report.watermark,
            report.counts,
            report.seconds,
            report.phases,
            report.dead_letter_reasons,
            report.broker_expiries,
        )
        phases = " ".join(f"{k} {v:.2f}s" for k, v in report.phases.items())
        log.info(
            "batch %d published: watermark %d in %.2fs (%s) %s",
            report.batch_id,
            report.watermark,
            report.seconds,
            phases,
            report.counts,
        )

    settings = JobSettings(
        # local paths from the project root, or s3a:// URIs (docs/object-storage.md)
        warehouse=storage.spark_uri(storage.resolve(config.paths.warehouse)),
        checkpoint=storage.spark_uri(storage.resolve(config.paths.checkpoint)),
        watermark_delay_ms=config.routes.watermark_delay_ms,
        flags=RouteFlags(config.routes.delete_topic_with_broker_registration),
        history=config.routes.history,
        content_min_chars=config.spark.content_min_chars,
        content_io_attempts=config.spark.content_io_attempts,
        content_io_backoff_s=config.spark.content_io_backoff_s,
    )
    if not storage.is_remote(settings.checkpoint):
        Path(settings.checkpoint).parent.mkdir(parents=True, exist_ok=True)
    classified = kafka_stream(
        spark, config.kafka, config.routes.max_future_skew_ms, settings.warehouse, settings.content
    )
    query = start_query(
        spark, classified, settings, available_now, config.kafka.trigger_interval, on_batch
    )

    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop_event.set())
    try:
        while query.isActive and not stop_event.is_set():
            query.awaitTermination(1)
            if collect_due.is_set():
                collect_due.clear()
                _collect_content(spark, settings.checkpoint, config, metrics)
    except StreamingQueryException:
        pass  # the query failed: told below, from query.exception()
    finally:
        if query.isActive:
            log.info("stopping the query (an unfinished micro-batch is replayed on restart)")
            query.stop()
        # The session outlives this run when it is shared (tests, a notebook): a listener left
        # on it would be called back, through py4j, for every later query of the session.
        spark.streams.removeListener(listener)
        if probe is not None:
            probe.stop.set()
    failure = query.exception()
    if failure is not None:
        raise _explained(failure, config)
    if collect_due.is_set():  # due as the query ended (an --available-now run): now, then
        _collect_content(spark, settings.checkpoint, config, metrics)
    return metrics


def _collect_content(
    spark: SparkSession, checkpoint: str, config: Config, metrics: JobMetrics
) -> None:
    """Delete the content no loadable state version, batch or worker can refer to
    (routing_lib/content_gc.py), while the query runs; a failed collection deletes nothing
    more and the job goes on."""
    from routing_lib.content_gc import collect_content

    try:
        report = collect_content(spark, checkpoint, config.spark.content_gc_grace_s)
    except Exception as exc:
        log.warning("content collection failed (nothing more deleted): %r", exc)
        return
    metrics.set("routelake_job_content_files", report.kept_files)
    metrics.set("routelake_job_content_bytes", report.kept_bytes)
    log.info("%s", report.line(dry_run=False))


def _explained(failure: BaseException, config: Config) -> StreamJobFailure:
    """The query's error as one paragraph an operator can act on; Spark's whole error text
    (the Java stack trace, causes included) goes to the log before it."""
    detail = _error_text(failure)
    places = JobPlaces(
        storage.resolve(config.paths.warehouse),
        storage.resolve(config.paths.checkpoint),
        config.kafka.bootstrap_servers,
        config.kafka.topic,
    )
    summary = explain(detail, places)
    log.error("%s\nSpark's error follows:\n%s", summary, detail)
    return StreamJobFailure(summary, detail)


def _error_text(failure: BaseException) -> str:
    """The message and Java stack trace of the query's exception and of its causes (pyspark
    keeps the cause, with its own whole trace, apart: that is where the reason is)."""
    parts: list[str] = []
    error: BaseException | None = failure
    while error is not None and len(parts) < 10:
        parts += [str(error), getattr(error, "_stackTrace", None) or ""]
        error = getattr(error, "_cause", None)
    return "\n".join(parts)
