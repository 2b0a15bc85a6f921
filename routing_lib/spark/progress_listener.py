"""StreamingQueryListener: Spark's own progress figures (state rows, Kafka lag) into metrics."""

from __future__ import annotations

import logging

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from routing_lib.metrics import JobMetrics

log = logging.getLogger("routelake.progress")


class ProgressListener(StreamingQueryListener):
    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # Spark's names
        log.info("query started: %s", event.id)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        state_rows = sum(op.numRowsTotal for op in progress.stateOperators)
        self.metrics.set("routelake_job_state_rows", state_rows)
        lag = 0.0
        for source in progress.sources:
            behind = (source.metrics or {}).get("maxOffsetsBehindLatest")
            if behind is not None:
                lag = max(lag, float(behind))
        self.metrics.set("routelake_job_kafka_lag_messages", lag)
        # where the whole micro-batch's time went (Spark's phases: addBatch is the writer's
        # foreachBatch; the rest is planning, offsets, the WAL and the state store's commit)
        durations = " ".join(f"{k} {v}ms" for k, v in sorted((progress.durationMs or {}).items()))
        log.info(
            "progress batch %d: %d input rows, %.0f rows/s, state rows %d, lag %g, "
            "watermark %s, durations %s",
            progress.batchId,
            progress.numInputRows,
            progress.processedRowsPerSecond or 0,
            state_rows,
            lag,
            (progress.eventTime or {}).get("watermark", "-"),
            durations,
        )

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        log.info("query terminated: %s %s", event.id, event.exception or "")
