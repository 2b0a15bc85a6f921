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
from dataclasses import dataclass

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
from routing_lib.core.clock import GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.group_routes import GroupRoutes, RouteFlags
from routing_lib.core.history import HistoryTracker, decode_history, encode_history, event_date
from routing_lib.core.tables import DEAD_LETTER, LATE_EVENT, TABLE_KEYS, RoutesSnapshot, diff
from routing_lib.core.wire import RS, event_json, packed_event_type, unpack_event
from routing_lib.ingest import CLOCK_KEY, DEAD_LETTER_KEY, TICK_KEY, internal_error_reason
from routing_lib.spark.admin_log import logged_deletes
from routing_lib.spark.checkpoint import batch_watermark
from schemas.route_event import ADMIN_EVENT_TYPES, INT64_MAX

log = logging.getLogger("routelake.step")

# The topic blobs are columns of their own: passed back unchanged when the topics did not change.
STATE_SCHEMA = "clock STRING, topics STRING, history STRING, topic_history STRING"
# kind: change | history | dead | late | stats. row_json: for change and history, a JSON array of
# rows (or keys, for a delete) sharing kind, table and op: one output row per bundle keeps the
# per-row Python and Arrow work out of a 10 000-topic registration; else one row as JSON.
OUTPUT_SCHEMA = "kind STRING, table STRING, op STRING, row_json STRING, raw BINARY"
OUTPUT_COLUMNS = ["kind", "table", "op", "row_json", "raw"]


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


def _stats(**counts: int) -> tuple:
    return ("stats", None, None, json.dumps(counts), None)


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
        rows.append(_stats(input_rows=len(pdf), dead_lettered=len(pdf)))
        yield _frame(rows)


def make_step(settings: StepSettings):
    def step(
        key: tuple, frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        (group,) = key
        if group == DEAD_LETTER_KEY:
            yield from _dead_letters(frames)
            return
        if group == CLOCK_KEY:  # a backfill's as-of tick: it only moves the watermark
            for _ in frames:
                pass
            return
        if group == TICK_KEY:  # TICK events: they moved the watermark; nothing else to do
            ticks = sum(len(pdf) for pdf in frames)
            yield _frame([_stats(input_rows=ticks, accepted=ticks, ticks=ticks)])
            return
        if group == ADMIN_KEY:  # DELETE_TOPIC as it arrives: into the admin log
            yield _frame(
                _admin_log_rows(frames, published_watermark(settings.checkpoint), settings.as_of)
            )
            return
        saved = state.get if state.exists else (None, None, None, None)
        clock = decode_clock(saved[:2]) if saved[0] else GroupClock(GroupRoutes(group))
        tracker = decode_history(saved[2:]) if saved[2] else HistoryTracker(group)
        before = RoutesSnapshot.of(clock.routes)
        watermark = state.getCurrentWatermarkMs()
        published = published_watermark(settings.checkpoint)
        target = watermark
        if settings.as_of is not None:  # the published tables never go past as_of
            published, target = min(published, settings.as_of), min(watermark, settings.as_of)

        out: list[tuple] = []
        bundles: dict[tuple[str, str, str], list] = defaultdict(list)
        before_topics = clock.routes.topics
        if settings.warehouse is not None and group != KV_KEY:
            merge_logged_deletes(clock, logged_deletes(settings.warehouse, published))
        input_rows = late = failed = fanned_out = 0
        for pdf in frames:
            for event_time, source, position, payload in zip(
                pdf["event_time"], pdf["source"], pdf["position"], pdf["payload"], strict=True
            ):
                if _is_fan_out_copy(payload):
                    # a DELETE_TOPIC copy for a holder: counted (and tabled if late) once,
                    # by the admin group; the log merge above may have added it already
                    fanned_out += 1
                    if not clock.is_late(int(event_time), published):
                        merge_logged_deletes(
                            clock, [((source, int(position)), unpack_event(payload))]
                        )
                    continue
                input_rows += 1
                try:
                    if clock.is_late(int(event_time), published):
                        out.append(_late_row(payload, source, int(position), published))
                        late += 1
                    elif packed_event_type(payload) in ADMIN_EVENT_TYPES:
                        event = unpack_event(payload)
                        clock.add(event, (source, int(position)))
                        bundles["history", ADMIN_EVENTS, "append"].append(
                            admin_row(event, (source, int(position)), event_date(event.eventTime))
                        )
                    else:  # decoded when applied
                        clock.add_packed(int(event_time), (source, int(position)), payload)
                except Exception as exc:  # last line of defence: this record only
                    out.append(_internal_dead_letter(payload, source, int(position), exc))
                    failed += 1
        if settings.history:
            advance, history = tracker.advance(clock, target, settings.flags)
            for h in history:
                bundles["history", h.table, h.op].append(h.row)
        else:
            advance = clock.advance(target, settings.flags)
        for item, reason in advance.failed:
            source, position = item.arrival
            out.append(_dead_row(item.packed, source, position, reason))
        failed += len(advance.failed)
        changes = diff(group, before, RoutesSnapshot.of(clock.routes))
        for change in changes:
            payload = (
                change.row
                if change.row is not None
                else dict(zip(TABLE_KEYS[change.table], change.key, strict=True))
            )
            op = "upsert" if change.row is not None else "delete"
            bundles["change", change.table, op].append(payload)
        out += [
            (kind, table, op, _json_array(rows), None)
            for (kind, table, op), rows in bundles.items()
        ]
        # An event that failed in the step is counted as accepted when it arrived (it passed
        # validation) and as dead-lettered now, so input = accepted + late + dead still holds
        # once per record: `accepted` excludes the records that failed on arrival.
        arrived_failed = failed - len(advance.failed)
        out.append(
            _stats(
                input_rows=input_rows,
                accepted=input_rows - late - arrived_failed,
                late=late,
                applied=len(advance.applied),
                expired=len(advance.expiries),
                changes=len(changes),
                dead_lettered=arrived_failed,
                failed_in_step=len(advance.failed),
                fanned_out=fanned_out,
            )
        )
        yield _frame(out)

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

    return step


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
    out.append(_stats(input_rows=total, accepted=total - late, late=late))
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
