"""One broker group's step: its saved state and new rows in, output rows and new state out.

The streaming job (routing_lib/spark/stateful.py) calls `step_group` for every group with new
rows or a passed timeout and only converts Spark's GroupState and pandas frames to and from
it; the tests' stream model calls the same function. What a step does, in order:

1. decode the saved state (content references resolved: routing_lib/core/content.py);
2. merge the logged DELETE_TOPIC events the group may need (core/admin.py);
3. sort each row: a fan-out copy, late (tabled), an administrative event, or pending;
4. advance the clock to the watermark, recording history;
5. diff the group's route rows, bundle every output row by (kind, table, op);
6. save the state (large values as content references) and the wake-up watermark.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from pydantic_core import PydanticSerializationError, to_json

from routing_lib.core.admin import (
    ADMIN_EVENTS,
    KV_KEY,
    admin_row,
    merge_logged_deletes,
    timeout_at,
    topics_grew,
)
from routing_lib.core.clock import Advance, Arrival, GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.columnar import ROW_COLUMNS, bundle_json
from routing_lib.core.content import CONTENT, CONTENT_FAILURES, ContentBackend
from routing_lib.core.group_facts import (
    NET,
    FactRecorder,
    GroupFact,
    TransitionFacts,
    expanded,
    state_transition,
)
from routing_lib.core.group_layout import add_history_rows, add_route_rows
from routing_lib.core.group_routes import GroupRoutes, RouteFlags, remember_held_registration
from routing_lib.core.history import HistoryTracker, decode_history, encode_history, event_date
from routing_lib.core.rows import WRITES, RowKind, RowOp, StepRow, internal_error_reason
from routing_lib.core.tables import DEAD_LETTER, LATE_EVENT, TABLE_KEYS, RoutesSnapshot, Row, diff
from routing_lib.core.wire import RS, event_json, inline, packed_event_type, unpack_event
from schemas.route_event import ADMIN_EVENT_TYPES, DeleteTopicEvent

log = logging.getLogger("routelake.step")


STEP_ROW_FIELDS = list(StepRow._fields)


@dataclass(frozen=True)
class StepConfig:
    """The step's switches, fixed for a query."""

    flags: RouteFlags
    as_of: int | None = None  # backfill --as-of: never move a group's clock past this
    history: bool = True  # also emit event-time history changes
    # The group layout (issue 36, core/group_layout.py): the group-level facts
    # (core/group_facts.py) as topic_base / topic_overlay rows and their change tables, instead
    # of per-topic topic_queue_table / topic_route_history rows (the writer derives the first,
    # the readers the second). Off: the per-topic layout of before issue 36.
    group_facts: bool = True
    # With group_facts, also emit the per-topic rows (the reference the tests compare with).
    per_topic_rows: bool = False

    @property
    def per_topic(self) -> bool:
        """Emit topic_queue_table and topic_route_history rows (a loop per topic a fault)."""
        return not self.group_facts or self.per_topic_rows


@dataclass(frozen=True)
class SavedGroup:
    """A group's state between steps: four texts, any of them a content reference."""

    clock: str
    topics: str
    history: str | None
    topic_history: str | None


class ContentPlace(Protocol):
    """Where a step's large state values go, from which size: routing_lib.content_files'
    ContentSettings (a query's content folder), or a HeldContent."""

    @property
    def min_chars(self) -> int: ...  # values shorter than this stay inline

    def backend(self) -> ContentBackend | None: ...  # None: this process's memory only


@dataclass(frozen=True)
class HeldContent:
    """A ContentPlace for a backend at hand (tests, benches): None keeps the content in this
    process's memory only."""

    store: ContentBackend | None
    min_chars: int

    def backend(self) -> ContentBackend | None:
        return self.store


class InputRow(NamedTuple):
    event_time: int
    arrival: Arrival
    payload: str


@dataclass(frozen=True)
class BatchContext:
    """What a step knows of its micro-batch."""

    watermark: int  # Spark's current watermark
    published: int  # the watermark the published tables show: older events are late
    batch_id: int | None = None
    now_ms: int = 0  # wall clock, for the seen_at_ms columns only


@dataclass(frozen=True)
class StepResult:
    rows: list[StepRow]
    state: SavedGroup | None  # None: remove the group's state
    # The smallest watermark at which the group's step must run again (None: at none). The
    # Spark adapter turns it into a state timeout (routing_lib/spark/watermark.py).
    wake_up: int | None
    # The group-level facts of the step's transitions (core/group_facts.py: one overlay change
    # per fault, base rows per changed topic; with history off, the step's net change), one
    # item per transition, not expanded: the rows above carry them as topic_base_changes /
    # topic_overlay_changes rows.
    transitions: tuple[TransitionFacts, ...] = ()

    @property
    def facts(self) -> list[GroupFact]:
        """The transitions' facts, one per changed base row or overlay, in order."""
        return expanded(self.transitions)


def json_array(rows: list[Row]) -> str:
    try:
        return to_json(rows).decode()  # pydantic-core: several times faster than json.dumps
    except PydanticSerializationError:  # e.g. a lone surrogate, which json.dumps escapes
        return json.dumps(rows)


def _bundle_text(table: str, rows: list[Row]) -> str:
    """A bundle's text: `rows` are blocks for a table with columnar bundles
    (core/columnar.py), rows for any other."""
    return bundle_json(rows) if table in ROW_COLUMNS else json_array(rows)


def stats_row(rows: Iterable[StepRow], **counts: int) -> StepRow:
    """The stats row of one step call: its counts, and which (kind, table) its other `rows`
    write to, so the writer learns what to commit from the stats rows alone (no shuffle)."""
    writes = sorted({f"{r.kind}/{r.table}" for r in rows})
    return StepRow(RowKind.STATS, None, None, json.dumps({**counts, WRITES: writes}), None)


@dataclass
class _GroupBatch:
    """What one step call collects for a broker group: output rows and the record counts."""

    context: BatchContext
    published: int
    out: list[StepRow] = field(default_factory=list)
    bundles: dict[tuple[RowKind, str, RowOp], list[Row]] = field(
        default_factory=lambda: defaultdict(list)
    )
    input_rows: int = 0
    late: int = 0
    failed: int = 0
    fanned_out: int = 0
    facts: FactRecorder | None = None

    def rows(self, advance: Advance, changes: int) -> list[StepRow]:
        bundled = [
            StepRow(kind, table, op, _bundle_text(table, rows), None)
            for (kind, table, op), rows in self.bundles.items()
        ]
        # An event that failed in the step is counted as accepted when it arrived (it passed
        # validation) and as dead-lettered now, so input = accepted + late + dead still holds
        # once per record: `accepted` excludes the records that failed on arrival.
        arrived_failed = self.failed - len(advance.failed)
        stats = stats_row(
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


def step_group(
    group: str,
    saved: SavedGroup | None,
    rows: Iterable[InputRow],
    context: BatchContext,
    config: StepConfig,
    logged_deletes: Iterable[tuple[Arrival, DeleteTopicEvent]] = (),
    content: ContentPlace | None = None,
) -> StepResult:
    """One call of the per-group step. `logged_deletes`: the admin log's DELETE_TOPIC events
    after the published watermark; `content`: where large state values go and from which size;
    None: every value stays inline."""
    # attached before the load reads a reference (a fresh Python worker knows no other way)
    backend = content.backend() if content is not None else None
    clock, tracker = _load(group, saved)
    if not config.per_topic:
        tracker.without_topic_routes()
    before = RoutesSnapshot.of(clock.routes)
    before_topics = clock.routes.topics
    before_state = clock.routes.topic_state
    published, target = context.published, context.watermark
    if config.as_of is not None:  # the published tables never go past as_of
        published, target = min(published, config.as_of), min(target, config.as_of)

    if group != KV_KEY:
        merge_logged_deletes(clock, logged_deletes)
    batch = _GroupBatch(context, published)
    for row in rows:
        _take_row(clock, batch, row)
    advance = _advance(clock, tracker, target, config, batch)
    transitions: tuple[TransitionFacts, ...] = ()
    if batch.facts is not None:
        transitions = tuple(batch.facts.transitions)
    elif config.group_facts:  # history off: the step's net change, stamped at the watermark
        after_state = clock.routes.topic_state
        net = state_transition(group, before_state, after_state, target, 0, (NET, None))
        transitions = () if net is None else (net,)
    changes = diff(group, before, RoutesSnapshot.of(clock.routes), topics=config.per_topic)
    layout_rows = 0
    if config.group_facts:
        layout_rows = add_route_rows(batch.bundles, group, before_state, clock.routes.topic_state)
        if config.history:
            add_history_rows(batch.bundles, transitions)
    for change in changes:
        if change.row is not None:
            batch.bundles[RowKind.CHANGE, change.table, RowOp.UPSERT].append(change.row)
        else:
            key = dict(zip(TABLE_KEYS[change.table], change.key, strict=True))
            batch.bundles[RowKind.CHANGE, change.table, RowOp.DELETE].append(key)
    out = batch.rows(advance, len(changes) + layout_rows)
    if clock.is_idle() and tracker.is_idle():
        return StepResult(out, None, None, transitions)
    state = _save(clock, tracker, config, content, backend)
    wake_up = timeout_at(clock, context.watermark, topics_grew(before_topics, clock.routes.topics))
    # A wake-up at or below the watermark is one `as_of` holds back: no later watermark helps.
    if wake_up is not None and wake_up <= context.watermark:
        wake_up = None
    return StepResult(out, state, wake_up, transitions)


def _load(group: str, saved: SavedGroup | None) -> tuple[GroupClock, HistoryTracker]:
    if saved is None or not saved.clock:
        return GroupClock(GroupRoutes(group)), HistoryTracker(group)
    clock = decode_clock((saved.clock, CONTENT.resolve(saved.topics)))
    if saved.history:
        tracker = decode_history((saved.history, CONTENT.resolve(saved.topic_history or "")))
    else:
        tracker = HistoryTracker(group)
    return clock, tracker


def _save(
    clock: GroupClock,
    tracker: HistoryTracker,
    config: StepConfig,
    content: ContentPlace | None,
    backend: ContentBackend | None,
) -> SavedGroup:
    def stored(text: str) -> str:
        if content is None or not text or len(text) < content.min_chars:
            return text
        return CONTENT.put(text, backend)

    def stored_opens(text: str) -> str:
        # the open intervals' start times change with every return; their names rarely do
        if content is None or not text or len(text) < content.min_chars:
            return text
        return CONTENT.put_opens(text, backend)

    clock_json, topics = encode_clock(clock)
    topics_value = stored(topics)
    if topics_value is not topics:  # stored as content: now known by reference
        remember_held_registration(clock.routes.topic_state.base, topics_value)
    if not config.history:
        return SavedGroup(clock_json, topics_value, None, None)
    history_json, topic_history = encode_history(tracker)
    return SavedGroup(clock_json, topics_value, history_json, stored_opens(topic_history))


def _take_row(clock: GroupClock, batch: _GroupBatch, row: InputRow) -> None:
    """One arriving record: late-tabled, or pending in the group's clock."""
    event_time, arrival, payload = row
    if is_fan_out_copy(payload):
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
            batch.out.append(late_row(payload, arrival, batch.published, batch.context))
            batch.late += 1
        elif packed_event_type(payload) in ADMIN_EVENT_TYPES:
            event = unpack_event(payload)
            clock.add(event, arrival)
            batch.bundles[RowKind.HISTORY, ADMIN_EVENTS, RowOp.APPEND].append(
                admin_row(event, arrival, event_date(event.eventTime))
            )
        else:  # decoded when applied
            clock.add_packed(event_time, arrival, payload)
    except CONTENT_FAILURES:  # unreadable content is not the record's fault: fail the task
        raise
    except Exception as exc:  # last line of defence: this record only
        log.warning("event %s:%s failed in the stateful step: %r", *arrival, exc)
        batch.out.append(dead_row(payload, arrival, internal_error_reason(exc), batch.context))
        batch.failed += 1


def _advance(
    clock: GroupClock,
    tracker: HistoryTracker,
    target: int,
    config: StepConfig,
    batch: _GroupBatch,
) -> Advance:
    """Move the group's clock to `target`, bundling history rows and dead-lettering the
    events whose application failed."""
    if config.history:
        if config.group_facts:
            batch.facts = FactRecorder(clock.routes.broker_name)
        observe = batch.facts.record if batch.facts is not None else None
        advance, history = tracker.advance(clock, target, config.flags, observe)
        for h in history:
            batch.bundles[RowKind.HISTORY, h.table, h.op].append(h.row)
    else:
        advance = clock.advance(target, config.flags)
    for item, reason in advance.failed:
        batch.out.append(dead_row(item.packed, item.arrival, reason, batch.context))
    batch.failed += len(advance.failed)
    return advance


def dead_row(payload: str, arrival: Arrival, reason: str, context: BatchContext) -> StepRow:
    text = _readable(payload)
    row = {
        "raw_text": text,
        "source": arrival[0],
        "position": arrival[1],
        "reason": reason,
        "seen_at_ms": context.now_ms,
        "batch_id": context.batch_id,
    }
    return StepRow(RowKind.DEAD, DEAD_LETTER, RowOp.APPEND, json.dumps(row), text.encode())


def _readable(payload: str) -> str:
    try:
        return inline(payload)
    except LookupError:  # the content is gone: the reference is all there is to show
        return payload


def late_row(payload: str, arrival: Arrival, published: int, context: BatchContext) -> StepRow:
    event = unpack_event(payload)
    row = {
        "event_time": event.eventTime,
        "broker_name": getattr(event, "brokerName", None),
        "event_type": event.eventType,
        "source": arrival[0],
        "position": arrival[1],
        "payload": event_json(event),
        "published_watermark": published,
        "seen_at_ms": context.now_ms,
        "batch_id": context.batch_id,
    }
    return StepRow(RowKind.LATE, LATE_EVENT, RowOp.APPEND, json.dumps(row), None)


_DELETE_TOPIC_TYPE = '"eventType":"DELETE_TOPIC"'  # JSON text: only a key can hold it


def is_fan_out_copy(payload: str | None) -> bool:
    """A DELETE_TOPIC outside the admin group is a fan-out copy (routing_lib/core/admin.py)."""
    if payload is None:
        return False
    head_end = payload.find(RS)  # a registration's topics follow its head: skip them
    return payload.find(_DELETE_TOPIC_TYPE, 0, head_end if head_end >= 0 else len(payload)) >= 0


def admin_log_rows(
    rows: Iterable[InputRow], context: BatchContext, as_of: int | None
) -> list[StepRow]:
    """The admin group's step: DELETE_TOPIC events into admin_events (the log), or late."""
    published = context.published if as_of is None else min(context.published, as_of)
    out: list[StepRow] = []
    logged, late, total = [], 0, 0
    for event_time, arrival, payload in rows:
        total += 1
        if event_time <= published:
            out.append(late_row(payload, arrival, published, context))
            late += 1
        else:
            logged.append(admin_row(unpack_event(payload), arrival, event_date(event_time)))
    if logged:
        out.append(StepRow(RowKind.HISTORY, ADMIN_EVENTS, RowOp.APPEND, json_array(logged), None))
    out.append(stats_row(out, input_rows=total, accepted=total - late, late=late))
    return out
