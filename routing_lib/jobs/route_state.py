"""The streaming job `route_state`: Kafka -> the same pipeline as the backfill -> Delta
(`routectl run`, `spark-submit jobs/route_state.py`)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from routing_lib import storage
from routing_lib.config import Config
from routing_lib.core.group_routes import RouteFlags
from routing_lib.jobs import app_name
from routing_lib.metrics import JobMetrics, KafkaProbe, serve_metrics
from routing_lib.spark.delta_writer import BatchReport
from routing_lib.spark.failures import JobPlaces, StreamJobFailure, explain
from routing_lib.spark.pipeline import ContentOptions, JobSettings, start_query
from routing_lib.spark.session import build_spark
from routing_lib.spark.sources import kafka_stream
from routing_lib.spark.warm_workers import start_python_workers

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
    probe = _serve_metrics(config, metrics, metrics_port)
    spark = build_spark(config, app_name("route_state"))
    # the Python workers start during the set-up below, not in the first micro-batch (local
    # masters; the thread ends on its own, long before the query does)
    start_python_workers(spark)
    from routing_lib.spark.progress_listener import ProgressListener

    listener = ProgressListener(metrics)
    spark.streams.addListener(listener)
    settings = job_settings(config)
    collection = ContentCollection(spark, settings.checkpoint, config, metrics)
    query = _start(spark, config, settings, available_now, _on_batch(metrics, collection))
    if install_signal_handlers and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop_event.set())
    try:
        _wait(query, stop_event)
    finally:
        stopped = query.isActive  # still running: stopped from outside, not caught up
        if stopped:
            log.info("stopping the query (an unfinished micro-batch is replayed on restart)")
            query.stop()
        # The session outlives this run when it is shared (tests, a notebook): a listener left
        # on it would be called back, through py4j, for every later query of the session.
        spark.streams.removeListener(listener)
        if probe is not None:
            probe.stop.set()
        failure = query.exception()
        # caught up (--available-now): a collection due as the query ended runs now
        collection.close(finish_due=not stopped and failure is None)
    if failure is not None:
        raise _explained(failure, config)
    return metrics


def job_settings(config: Config) -> JobSettings:
    """The query's settings from the configuration."""
    return JobSettings(
        # local paths from the project root, or s3a:// URIs (docs/object-storage.md)
        warehouse=storage.spark_uri(storage.resolve(config.paths.warehouse)),
        checkpoint=storage.spark_uri(storage.resolve(config.paths.checkpoint)),
        watermark_delay_ms=config.routes.watermark_delay_ms,
        flags=RouteFlags(config.routes.delete_topic_with_broker_registration),
        history=config.routes.history,
        content_options=ContentOptions.of(config.spark),
    )


def _serve_metrics(
    config: Config, metrics: JobMetrics, metrics_port: int | None
) -> KafkaProbe | None:
    """GET /metrics on metrics_port and the Kafka probe behind routelake_job_kafka_up."""
    if not metrics_port:
        return None
    serve_metrics(metrics, metrics_port, config.serve.host)
    return KafkaProbe(config.kafka.bootstrap_servers, metrics).start()


def _start(
    spark: SparkSession,
    config: Config,
    settings: JobSettings,
    available_now: bool,
    on_batch: Callable[[BatchReport], None],
) -> StreamingQuery:
    """Kafka -> the pipeline -> Delta, started."""
    if not storage.is_remote(settings.checkpoint):
        Path(settings.checkpoint).parent.mkdir(parents=True, exist_ok=True)
    classified = kafka_stream(
        spark, config.kafka, config.routes.max_future_skew_ms, settings.warehouse, settings.content
    )
    return start_query(
        spark, classified, settings, available_now, config.kafka.trigger_interval, on_batch
    )


def _on_batch(metrics: JobMetrics, collection: ContentCollection) -> Callable[[BatchReport], None]:
    """What each published micro-batch does: metrics, a collection when due, a log line."""

    def published(report: BatchReport) -> None:
        collection.batch_published()
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

    return published


def _wait(query: StreamingQuery, stop_event: threading.Event) -> None:
    """Until the query ends (caught up, or failed: told from query.exception()) or is told to
    stop. One-second waits, so a stop is seen within a second."""
    try:
        while query.isActive and not stop_event.is_set():
            query.awaitTermination(1)
    except StreamingQueryException:
        pass


class ContentCollection:
    """The content store's collection every [spark] content_gc_every_batches published
    micro-batches, on a thread of its own: the query loop, and so a SIGTERM, never waits for
    one. At most one runs at a time; batches published meanwhile make one more due."""

    JOB_GROUP = "routelake-content-collection"
    STOP_WAIT_S = 10.0  # how long a stop waits for a collection in flight (its jobs cancelled)

    def __init__(
        self, spark: SparkSession, checkpoint: str, config: Config, metrics: JobMetrics
    ) -> None:
        self.spark, self.checkpoint, self.config, self.metrics = spark, checkpoint, config, metrics
        self.every = config.spark.content_gc_every_batches
        self.published = 0
        self._due = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if self.every > 0:
            from routing_lib.content_gc import check_grace

            check_grace(config.spark.content_gc_grace_s)  # refused before the query starts
            self._thread = threading.Thread(target=self._run, daemon=True, name="content-gc")
            self._thread.start()

    def batch_published(self) -> None:
        """Called from the batch callback: every `every`-th batch makes a collection due."""
        self.published += 1
        if self.every > 0 and self.published % self.every == 0:
            self._due.set()

    def _run(self) -> None:
        # Spark jobs of this thread in a group of their own, so that close() can cancel them
        self.spark.sparkContext.setJobGroup(self.JOB_GROUP, "content collection", True)
        while True:
            self._due.wait()
            if self._closed.is_set():
                return
            self._due.clear()
            self.collect()

    def collect(self) -> None:
        _collect_content(self.spark, self.checkpoint, self.config, self.metrics)

    def close(self, finish_due: bool) -> None:
        """Stop the thread. finish_due (the query caught up and ended by itself): wait for a
        collection in flight, then run one that is due. Else (stopped): cancel the Spark jobs
        of one in flight and wait for it at most STOP_WAIT_S."""
        if self._thread is None:
            return
        due = self._due.is_set()
        self._closed.set()
        self._due.set()  # wakes the thread, which sees it is closed
        if not finish_due:
            self.spark.sparkContext.cancelJobGroup(self.JOB_GROUP)
        self._thread.join(None if finish_due else self.STOP_WAIT_S)
        if self._thread.is_alive():
            log.warning("content collection still running after the stop: left to end by itself")
        elif finish_due and due:
            self.collect()


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
