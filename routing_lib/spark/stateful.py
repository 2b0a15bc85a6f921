"""The per-group step run by applyInPandasWithState: events in, row changes out.

Spark calls `step` for every broker group with new rows or whose timeout has passed. The
group's GroupClock (routes + events still ahead of the watermark) lives in the state store as
JSON; the timeout is the next watermark at which the clock would change something.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd
from pydantic_core import PydanticSerializationError, to_json
from pyspark import TaskContext
from pyspark.sql.streaming.state import GroupState

from routing_lib.core.admin import (
    ADMIN_EVENTS,
    ADMIN_KEY,
    KV_KEY,
    admin_row,
    merge_logged_deletes,
    timeout_at,
    topics_grew,
)
from routing_lib.core.clock import Advance, Arrival, GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.group_routes import GroupRoutes, RouteFlags
from routing_lib.core.history import HistoryTracker, decode_history, encode_history, event_date
from routing_lib.core.tables import DEAD_LETTER, LATE_EVENT, TABLE_KEYS, RoutesSnapshot, diff
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import RS, event_json, packed_event_type, unpack_event
from routing_lib.ingest import CLOCK_KEY, DEAD_LETTER_KEY, TICK_KEY, internal_error_reason
from routing_lib.spark.admin_log import logged_deletes
from routing_lib.spark.checkpoint import batch_watermark
from schemas.route_event import ADMIN_EVENT_TYPES, INT64_MAX, DeleteTopicEvent

log = logging.getLogger("routelake.step")

# The topic blobs are columns of their own: passed back unchanged when the topics did not change.
STATE_SCHEMA = "clock STRING, topics STRING, history STRING, topic_history STRING"
# kind: change | history | dead | late | stats. row_json: for change and history, a JSON array of
# rows (or keys, for a delete) sharing kind, table and op: one output row per bundle keeps the
# per-row Python and Arrow work out of a 10 000-topic registration; else one row as JSON.
OUTPUT_SCHEMA = "kind STRING, table STRING, op STRING, row_json STRING, raw BINARY"
OUTPUT_COLUMNS = ["kind", "table", "op", "row_json", "raw"]
WRITES = "writes"  # the stats key listing "kind/table" of the call's other rows


@dataclass(frozen=True)
class StepSettings:
    checkpoint: str
    flags: RouteFlags
    as_of: int | None = None  # backfill --as-of: never move a group's clock past this
    history: bool = True  # also emit event-time history changes
    warehouse: str | None = None  # for the admin log of DELETE_TOPIC (None: not read)


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


def _json_array(rows: list) -> str:
    try:
        return to_json(rows).decode()  # pydantic-core: several times faster than json.dumps
    except PydanticSerializationError:  # e.g. a lone surrogate, which json.dumps escapes
        return json.dumps(rows)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=OUTPUT_COLUMNS)


def _stats(rows: list[tuple], **counts: int) -> tuple:
    """The stats row of one step call: its counts, and which (kind, table) its other `rows`
    write to, so the writer learns what to commit from the stats rows alone (no shuffle)."""
    writes = sorted({f"{kind}/{table}" for kind, table, *_ in rows})
    return ("stats", None, None, json.dumps({**counts, WRITES: writes}), None)


def _dead_letters(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
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
            rows.append(("dead", DEAD_LETTER, "append", json.dumps(row), raw))
        rows.append(_stats(rows, input_rows=len(pdf), dead_lettered=len(pdf)))
        yield _frame(rows)


def make_step(settings: StepSettings):
    def step(
        key: tuple, frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        (group,) = key
        special = _special_group(group, frames, settings)
        if special is not None:
            yield from special
        else:
            yield from _broker_group_step(group, frames, state, settings)

    return step


def _special_group(
    group: str, frames: Iterator[pd.DataFrame], settings: StepSettings
) -> Iterator[pd.DataFrame] | None:
    """The rows of a group key that is not a broker group (ingest.py), or None."""
    if group == DEAD_LETTER_KEY:
        return _dead_letters(frames)
    if group == CLOCK_KEY:  # a backfill's as-of tick: it only moves the watermark
        for _ in frames:
            pass
        return iter(())
    if group == TICK_KEY:  # TICK events: they moved the watermark; nothing else to do
        ticks = sum(len(pdf) for pdf in frames)
        return iter([_frame([_stats([], input_rows=ticks, accepted=ticks, ticks=ticks)])])
    if group == ADMIN_KEY:  # DELETE_TOPIC as it arrives: into the admin log
        published = published_watermark(settings.checkpoint)
        return iter([_frame(_admin_log_rows(frames, published, settings.as_of))])
    return None


@dataclass
class _GroupBatch:
    """What one step call collects for a broker group: output rows and the record counts."""

    published: int  # the watermark the published tables show: older events are late
    out: list[tuple] = field(default_factory=list)
    bundles: dict[tuple[str, str, str], list] = field(default_factory=lambda: defaultdict(list))
    input_rows: int = 0
    late: int = 0
    failed: int = 0
    fanned_out: int = 0

    def rows(self, advance: Advance, changes: int) -> list[tuple]:
        bundled = [
            (kind, table, op, _json_array(rows), None)
            for (kind, table, op), rows in self.bundles.items()
        ]
        # An event that failed in the step is counted as accepted when it arrived (it passed
        # validation) and as dead-lettered now, so input = accepted + late + dead still holds
        # once per record: `accepted` excludes the records that failed on arrival.
        arrived_failed = self.failed - len(advance.failed)
        stats = _stats(
            [*self.out, *bundled],
            input_rows=self.input_rows,
            accepted=self.input_rows - self.late - arrived_failed,
            late=self.late,
            applied=len(advance.applied),
            expired=len(advance.expiries),
            changes=changes,
            dead_lettered=arrived_failed,
            failed_in_step=len(advance.failed),
            fanned_out=self.fanned_out,
        )
        return [*self.out, *bundled, stats]


def _broker_group_step(
    group: str, frames: Iterator[pd.DataFrame], state: GroupState, settings: StepSettings
) -> Iterator[pd.DataFrame]:
    saved = state.get if state.exists else (None, None, None, None)
    clock = decode_clock(saved[:2]) if saved[0] else GroupClock(GroupRoutes(group))
    tracker = decode_history(saved[2:]) if saved[2] else HistoryTracker(group)
    before = RoutesSnapshot.of(clock.routes)
    before_topics = clock.routes.topics
    watermark = state.getCurrentWatermarkMs()
    published = published_watermark(settings.checkpoint)
    target = watermark
    if settings.as_of is not None:  # the published tables never go past as_of
        published, target = min(published, settings.as_of), min(watermark, settings.as_of)

    if settings.warehouse is not None and group != KV_KEY:
        merge_logged_deletes(clock, logged_deletes(settings.warehouse, published))
    batch = _GroupBatch(published)
    for pdf in frames:
        for event_time, source, position, payload in zip(
            pdf["event_time"], pdf["source"], pdf["position"], pdf["payload"], strict=True
        ):
            _take_row(clock, batch, int(event_time), (source, int(position)), payload)
    advance = _advance(clock, tracker, target, settings, batch)
    changes = diff(group, before, RoutesSnapshot.of(clock.routes))
    for change in changes:
        if change.row is not None:
            batch.bundles["change", change.table, "upsert"].append(change.row)
        else:
            key = dict(zip(TABLE_KEYS[change.table], change.key, strict=True))
            batch.bundles["change", change.table, "delete"].append(key)
    yield _frame(batch.rows(advance, len(changes)))
    _save_group(state, clock, tracker, settings, watermark, before_topics)


def _take_row(
    clock: GroupClock, batch: _GroupBatch, event_time: int, arrival: Arrival, payload: str
) -> None:
    """One arriving record: late-tabled, or pending in the group's clock."""
    if _is_fan_out_copy(payload):
        # a DELETE_TOPIC copy for a holder: counted (and tabled if late) once, by the admin
        # group; the log merge before the rows may have added it already
        batch.fanned_out += 1
        event = unpack_event(payload)
        if isinstance(event, DeleteTopicEvent) and not clock.is_late(event_time, batch.published):
            merge_logged_deletes(clock, [(arrival, event)])
        return
    batch.input_rows += 1
    try:
        if clock.is_late(event_time, batch.published):
            batch.out.append(_late_row(payload, *arrival, batch.published))
            batch.late += 1
        elif packed_event_type(payload) in ADMIN_EVENT_TYPES:
            event = unpack_event(payload)
            clock.add(event, arrival)
            batch.bundles["history", ADMIN_EVENTS, "append"].append(
                admin_row(event, arrival, event_date(event.eventTime))
            )
        else:  # decoded when applied
            clock.add_packed(event_time, arrival, payload)
    except Exception as exc:  # last line of defence: this record only
        batch.out.append(_internal_dead_letter(payload, *arrival, exc))
        batch.failed += 1


def _advance(
    clock: GroupClock,
    tracker: HistoryTracker,
    target: int,
    settings: StepSettings,
    batch: _GroupBatch,
) -> Advance:
    """Move the group's clock to `target`, bundling history rows and dead-lettering the
    events whose application failed."""
    if settings.history:
        advance, history = tracker.advance(clock, target, settings.flags)
        for h in history:
            batch.bundles["history", h.table, h.op].append(h.row)
    else:
        advance = clock.advance(target, settings.flags)
    for item, reason in advance.failed:
        batch.out.append(_dead_row(item.packed, *item.arrival, reason))
    batch.failed += len(advance.failed)
    return advance


def _save_group(
    state: GroupState,
    clock: GroupClock,
    tracker: HistoryTracker,
    settings: StepSettings,
    watermark: int,
    before_topics: TopicTable,
) -> None:
    """Store the group's state (or drop it when idle) and the watermark to wake it up at."""
    if clock.is_idle() and tracker.is_idle():
        state.remove()
        return
    history_state = encode_history(tracker) if settings.history else (None, None)
    state.update((*encode_clock(clock), *history_state))
    wake_up = timeout_at(clock, watermark, topics_grew(before_topics, clock.routes.topics))
    # Spark fires an event-time timeout once the watermark is strictly past it.
    # A deadline past INT64_MAX (a huge heartbeatTimeoutMillis) is never reached by a
    # watermark, and the timeout must fit a Java long.
    if wake_up is not None and watermark <= wake_up - 1 <= INT64_MAX:
        state.setTimeoutTimestamp(wake_up - 1)


def _dead_row(payload: str, source: str, position: int, reason: str) -> tuple:
    row = {
        "raw_text": payload,
        "source": source,
        "position": position,
        "reason": reason,
        "seen_at_ms": int(time.time() * 1000),
        "batch_id": _current_batch_id(),
    }
    return ("dead", DEAD_LETTER, "append", json.dumps(row), payload.encode())


def _internal_dead_letter(payload: str, source: str, position: int, exc: Exception) -> tuple:
    log.warning("event %s:%s failed in the stateful step: %r", source, position, exc)
    return _dead_row(payload, source, position, internal_error_reason(exc))


_DELETE_TOPIC_TYPE = '"eventType":"DELETE_TOPIC"'  # JSON text: only a key can hold it


def _is_fan_out_copy(payload: str | None) -> bool:
    """A DELETE_TOPIC outside the admin group is a fan-out copy (routing_lib/core/admin.py)."""
    if payload is None:
        return False
    head_end = payload.find(RS)  # a registration's topics follow its head: skip them
    return payload.find(_DELETE_TOPIC_TYPE, 0, head_end if head_end >= 0 else len(payload)) >= 0


def _admin_log_rows(
    frames: Iterator[pd.DataFrame], published: int, as_of: int | None
) -> list[tuple]:
    """Admin-group rows: DELETE_TOPIC events into admin_events (the log), or late-tabled."""
    if as_of is not None:
        published = min(published, as_of)
    out: list[tuple] = []
    logged, late, total = [], 0, 0
    for pdf in frames:
        for event_time, source, position, payload in zip(
            pdf["event_time"], pdf["source"], pdf["position"], pdf["payload"], strict=True
        ):
            total += 1
            if int(event_time) <= published:
                out.append(_late_row(payload, source, int(position), published))
                late += 1
            else:
                logged.append(
                    admin_row(
                        unpack_event(payload), (source, int(position)), event_date(int(event_time))
                    )
                )
    if logged:
        out.append(("history", ADMIN_EVENTS, "append", _json_array(logged), None))
    out.append(_stats(out, input_rows=total, accepted=total - late, late=late))
    return out


def _late_row(payload: str, source: str, position: int, published: int) -> tuple:
    event = unpack_event(payload)
    row = {
        "event_time": event.eventTime,
        "broker_name": getattr(event, "brokerName", None),
        "event_type": event.eventType,
        "source": source,
        "position": position,
        "payload": event_json(event),
        "published_watermark": published,
        "seen_at_ms": int(time.time() * 1000),
        "batch_id": _current_batch_id(),
    }
    return ("late", LATE_EVENT, "append", json.dumps(row), None)
