"""The applyInPandasWithState adapter: Spark's GroupState and pandas frames <-> the core step.

Spark calls `step` for every group key with new rows or whose timeout has passed. Broker groups
go to routing_lib/core/step.py (`step_group`: everything subtle lives there); the keys that are
not broker groups (routing_lib/ingest.py) are handled here: dead letters, ticks, the admin log.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
from pyspark import TaskContext
from pyspark.sql.streaming.state import GroupState

from routing_lib.content_files import ContentSettings
from routing_lib.core.admin import ADMIN_KEY, KV_KEY
from routing_lib.core.group_routes import RouteFlags
from routing_lib.core.rows import RowKind, RowOp, StepRow
from routing_lib.core.step import (
    STEP_ROW_FIELDS,
    BatchContext,
    InputRow,
    SavedGroup,
    StepConfig,
    admin_log_rows,
    stats_row,
    step_group,
)
from routing_lib.core.tables import DEAD_LETTER
from routing_lib.ingest import CLOCK_KEY, DEAD_LETTER_KEY, TICK_KEY
from routing_lib.spark.admin_log import logged_deletes
from routing_lib.spark.checkpoint import batch_watermark, watermark_lead
from routing_lib.spark.watermark import spark_timeout

# Large values (a group's topics, its open topic intervals) are content references: the state
# row stays small whatever the group's topic count (routing_lib/core/content.py).
STATE_SCHEMA = "clock STRING, topics STRING, history STRING, topic_history STRING"
OUTPUT_SCHEMA = "kind STRING, table STRING, op STRING, row_json STRING, raw BINARY"
OUTPUT_COLUMNS = STEP_ROW_FIELDS


@dataclass(frozen=True)
class StepSettings:
    checkpoint: str
    flags: RouteFlags
    as_of: int | None = None  # backfill --as-of: never move a group's clock past this
    history: bool = True  # also emit event-time history changes
    warehouse: str | None = None  # for the admin log of DELETE_TOPIC (None: not read)
    content: ContentSettings | None = None  # None: large values stay inline in the state

    @property
    def config(self) -> StepConfig:
        return StepConfig(self.flags, self.as_of, self.history)


def _current_batch_id() -> int | None:
    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return int(value) if value is not None else None


# Python workers are reused across queries, so the key includes the checkpoint.
_published_cache: dict[tuple[str, int], int] = {}


def published_watermark(checkpoint: str) -> int:
    """The watermark of the tables as the previous micro-batch left them."""
    batch_id = _current_batch_id()
    if batch_id is None:
        return 0
    key = (checkpoint, batch_id)
    if key not in _published_cache:
        _published_cache[key] = batch_watermark(checkpoint, batch_id - 1)
    return _published_cache[key]


def _frame(rows: list[StepRow]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=OUTPUT_COLUMNS)


def _input_rows(frames: Iterable[pd.DataFrame]) -> Iterator[InputRow]:
    for pdf in frames:
        for event_time, source, position, payload in zip(
            pdf["event_time"], pdf["source"], pdf["position"], pdf["payload"], strict=True
        ):
            yield InputRow(int(event_time), (source, int(position)), payload)


def _context(state: GroupState | None, settings: StepSettings) -> BatchContext:
    return BatchContext(
        watermark=(
            # read as the checkpoint's lead file says (routing_lib/spark/checkpoint.py)
            watermark_lead(settings.checkpoint).job_watermark(
                _current_batch_id(), state.getCurrentWatermarkMs()
            )
            if state is not None
            else 0
        ),
        published=published_watermark(settings.checkpoint),
        batch_id=_current_batch_id(),
        now_ms=int(time.time() * 1000),
    )


def make_step(
    settings: StepSettings,
) -> Callable[[tuple[str], Iterable[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    def step(
        key: tuple[str], frames: Iterable[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        (group,) = key
        if group == DEAD_LETTER_KEY:
            yield from _dead_letters(frames)
        elif group == CLOCK_KEY:  # a backfill's as-of tick: it only moves the watermark
            for _ in frames:
                pass
        elif group == TICK_KEY:  # TICK events moved the watermark; nothing else to do
            ticks = sum(len(pdf) for pdf in frames)
            yield _frame([stats_row([], input_rows=ticks, accepted=ticks, ticks=ticks)])
        elif group == ADMIN_KEY:  # DELETE_TOPIC as it arrives: into the admin log
            context = _context(None, settings)
            yield _frame(admin_log_rows(_input_rows(frames), context, settings.as_of))
        else:
            with cyclic_gc_paused():
                rows = _broker_group_step(group, frames, state, settings)
            yield _frame(rows)

    return step


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block. A broker group's step allocates
    containers by the ten thousand for a 10 000-topic registration (a decoded table, its
    rows, the bundles' columns), nearly all freed by reference counting; meanwhile the
    collector, triggered by allocation counts, scans them and the worker's whole heap (pandas,
    pyarrow, pyspark) again and again: a third of a cold group's step (harness over 30 groups
    of the cold start: 66 -> 36 ms of CPU each). Whatever cycles the block leaves are
    collected by the next collection after it."""
    if not gc.isenabled():  # paused already (nested), or off in this process
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _broker_group_step(
    group: str, frames: Iterable[pd.DataFrame], state: GroupState, settings: StepSettings
) -> list[StepRow]:
    saved = SavedGroup(*state.get) if state.exists else None
    context = _context(state, settings)
    published = context.published
    if settings.as_of is not None:
        published = min(published, settings.as_of)
    deletes = (
        logged_deletes(settings.warehouse, published)
        if settings.warehouse is not None and group != KV_KEY
        else []
    )
    result = step_group(
        group, saved, _input_rows(frames), context, settings.config, deletes, settings.content
    )
    if result.state is None:
        state.remove()
    else:
        new = result.state
        state.update((new.clock, new.topics, new.history, new.topic_history))
        timeout = spark_timeout(result.wake_up)
        if timeout is not None:
            state.setTimeoutTimestamp(timeout)
    return result.rows


def _dead_letters(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    seen_at = int(time.time() * 1000)
    batch_id = _current_batch_id()
    for pdf in frames:
        rows = []
        for raw, source, position, reason in zip(
            pdf["raw"], pdf["source"], pdf["position"], pdf["reason"], strict=True
        ):
            raw = bytes(raw) if raw is not None else b""
            row = {
                "raw_text": raw.decode("utf-8", errors="replace"),
                "source": source,
                "position": int(position),
                "reason": reason,
                "seen_at_ms": seen_at,
                "batch_id": batch_id,
            }
            rows.append(StepRow(RowKind.DEAD, DEAD_LETTER, RowOp.APPEND, json.dumps(row), raw))
        rows.append(stats_row(rows, input_rows=len(pdf), dead_lettered=len(pdf)))
        yield _frame(rows)
