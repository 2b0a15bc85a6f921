"""The job's event-time watermark on Spark's side: Spark's clock runs one millisecond ahead.

The step asks to run again at the first watermark at or past a deadline (`StepResult.wake_up`,
routing_lib/core/step.py). Spark fires an event-time timeout only once its watermark is
strictly past the timeout, and refuses a timeout below 1. On the job's own clock the timeout of
a deadline D would be D - 1, which is 0, refused, for an event at eventTime 1 (the least the
schema admits). Clamping it to 1 would wake the group at watermark 2 instead of 1: a backfill
`--as-of 1`, or any batch whose watermark is exactly 1, would publish tables without the event.

So Spark computes its watermark on eventTime + 1 (`spark_event_time`): Spark's watermark is the
job's plus one, every reading of it goes through `job_watermark`, and a deadline D is the
timeout D itself (it fires when Spark's watermark > D, that is when the job's is >= D). Every
deadline is >= 1 and, being past the current watermark, never below Spark's.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from schemas.route_event import INT64_MAX

SPARK_LEAD_MS = 1


def spark_event_time(event_time: Column) -> Column:
    """The timestamp Spark's watermark is computed on, for an eventTime (ms) column."""
    return F.timestamp_millis(event_time + F.lit(SPARK_LEAD_MS))


def job_watermark(spark_watermark_ms: int) -> int:
    """The job's watermark (State(W) of the contract) for Spark's; 0 before any event."""
    return max(spark_watermark_ms - SPARK_LEAD_MS, 0)


@dataclass(frozen=True)
class WatermarkLead:
    """How a checkpoint's Spark watermarks read as the job's. A checkpoint begun by this
    version has the lead from batch 0. One written by a version from before the lead
    (Spark's watermark was the job's) keeps its batches' watermarks as they are, and from
    `since_batch` on the job's watermark never reads below `floor_ms`, the last one that
    version published: Spark carries that watermark over until new events pass it, and read
    minus 1 it would step the published watermark back."""

    since_batch: int = 0  # the first batch whose Spark watermark runs SPARK_LEAD_MS ahead
    floor_ms: int = 0  # the job's watermark when this version took the checkpoint over

    def job_watermark(self, batch_id: int | None, spark_watermark_ms: int) -> int:
        if batch_id is not None and batch_id < self.since_batch:
            return spark_watermark_ms
        return max(job_watermark(spark_watermark_ms), self.floor_ms)


def spark_timeout(wake_up: int | None) -> int | None:
    """The GroupState timeout that fires once the job's watermark reaches `wake_up`; None when
    no watermark can reach it (a deadline past INT64_MAX, from a huge heartbeatTimeoutMillis):
    a timeout must fit a Java long."""
    if wake_up is None or wake_up > INT64_MAX:
        return None
    return wake_up
