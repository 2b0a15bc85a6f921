"""Run the real applyInPandasWithState step function in-process, with pyspark's own GroupState
carrying a group's state between calls as the Python worker does."""

from __future__ import annotations

import pandas as pd
from pyspark.sql.streaming.state import GroupState

from routing_lib.content_files import ContentSettings
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.spark.stateful import STATE_SCHEMA, StepSettings, make_step
from routing_lib.spark.watermark import SPARK_LEAD_MS


def group_state(values: tuple | None = None, watermark: int = 0) -> GroupState:
    """A real pyspark GroupState, as the Python worker builds it for applyInPandasWithState."""
    from pyspark.sql.types import Row, StringType, StructField, StructType

    names = [column.split()[0] for column in STATE_SCHEMA.split(", ")]
    return GroupState(
        optionalValue=Row(*values) if values else Row(),
        batchProcessingTimeMs=0,
        eventTimeWatermarkMs=watermark,
        timeoutConf="EventTimeTimeout",
        hasTimedOut=False,
        watermarkPresent=True,
        defined=values is not None,
        updated=False,
        removed=False,
        timeoutTimestamp=-1,
        keyAsUnsafe=b"",
        valueSchema=StructType([StructField(n, StringType()) for n in names]),
    )


def run_step(
    events: list[tuple],
    state: GroupState,
    watermark: int,
    group: str = "edge",
    content: ContentSettings | None = None,
) -> pd.DataFrame:
    """`watermark`: the job's; the GroupState holds Spark's (routing_lib/spark/watermark.py)."""
    state._event_time_watermark_ms = watermark + SPARK_LEAD_MS
    settings = StepSettings("/nonexistent-checkpoint", DEFAULT_FLAGS, history=True, content=content)
    frame = pd.DataFrame(events, columns=["event_time", "source", "position", "payload"])
    return pd.concat(list(make_step(settings)((group,), iter([frame]), state)))
