"""The streaming job without Spark: micro-batches, and per-group calls of the shipped step
(routing_lib/core/step.py) only when Spark would make them (rows, or a passed timeout), the
published tables lagging one batch, the admin log and the DELETE_TOPIC fan-out
(routing_lib/core/admin.py). State travels between calls in its saved form, as in Spark.

The published route tables are the steps' row changes applied per batch by the catalog's keys
(what the writer's MERGE does with them), and a batch never holds two changes of one key
(a Delta MERGE refuses two source rows matching one target row); they must equal the union of
the groups' states."""

from __future__ import annotations

import json
import random
from collections import defaultdict

from routing_lib.core.admin import ADMIN_KEY, group_key
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY, spec
from routing_lib.core.clock import Arrival
from routing_lib.core.codec import decode_clock
from routing_lib.core.columnar import bundle_rows
from routing_lib.core.content import CONTENT, ContentBackend
from routing_lib.core.dump import canonical_dump, project
from routing_lib.core.fact_rows import overlay_of_row, queue_of_row
from routing_lib.core.group_facts import topic_queue_rows
from routing_lib.core.group_routes import DEFAULT_FLAGS, RouteFlags
from routing_lib.core.replay import fleet_rows
from routing_lib.core.rows import RowKind, RowOp, StepRow
from routing_lib.core.step import (
    BatchContext,
    HeldContent,
    InputRow,
    SavedGroup,
    StepConfig,
    StepResult,
    admin_log_rows,
    step_group,
)
from routing_lib.core.tables import ROUTE_TABLES, TABLE_KEYS, TOPIC_QUEUE, Row, RowKey
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import Event, externalize, pack_event
from schemas import DeleteTopicEvent, TickEvent

NO_CONTENT_REFS = 1 << 62  # a min_chars no value reaches: everything stays inline


class StreamModel:
    """`content_refs`: registrations' topic tables and large state values travel as content
    references (every one, whatever its size), as stage one and the step store them."""

    def __init__(
        self,
        delay_ms: int,
        content_refs: bool,
        flags: RouteFlags = DEFAULT_FLAGS,
        backend: ContentBackend | None = None,
    ):
        self.delay_ms = delay_ms
        self.config = StepConfig(flags)
        self.min_chars = 0 if content_refs else NO_CONTENT_REFS
        self.backend = backend  # None: the content stays in this process's memory
        self.states: dict[str, SavedGroup] = {}
        self.wake_ups: dict[str, int] = {}  # group -> the watermark its step must run at
        self.log: list[tuple[Arrival, DeleteTopicEvent]] = []
        self.max_seen = 0
        self.published = 0
        self.late = 0
        # the published route tables: table -> key -> row
        # (with the group layout, topic_queue_table is derived from topic_base and topic_overlay
        # per touched group, as the writer derives it)
        self.tables: dict[str, dict[RowKey, Row]] = {
            t: {} for t in (*ROUTE_TABLES, TOPIC_BASE, TOPIC_OVERLAY)
        }

    def _topic_names(self, saved: SavedGroup) -> list[str]:
        return TopicTable.from_blob(CONTENT.resolve(saved.topics)).names()

    def holders(self, topic: str) -> list[str]:
        """Groups holding the topic in the published topicQueueTable."""
        return [k for k, s in self.states.items() if topic in self._topic_names(s)]

    def batch(self, items: list[tuple[Event | TickEvent, Arrival]]) -> None:
        watermark = max(self.max_seen - self.delay_ms, 0)  # Spark's watermark lags one batch
        rows: dict[str, list[InputRow]] = defaultdict(list)
        for event, arrival in items:
            self.max_seen = max(self.max_seen, event.eventTime)
            if isinstance(event, TickEvent):
                continue
            payload = externalize(pack_event(event), self.backend, self.min_chars)
            rows[group_key(event)].append(InputRow(event.eventTime, arrival, payload))
            if isinstance(event, DeleteTopicEvent):
                for holder in self.holders(event.topic):
                    rows[holder].append(InputRow(event.eventTime, arrival, payload))
        due = {k for k, wake_up in self.wake_ups.items() if wake_up <= watermark}
        context = BatchContext(watermark, self.published)
        logged: list[tuple[Arrival, DeleteTopicEvent]] = []
        written: list[StepRow] = []
        for key in sorted(rows.keys() | due):
            self.wake_ups.pop(key, None)
            if key == ADMIN_KEY:  # the admin group's step; its log rows become the log
                out = admin_log_rows(rows[key], context, None)
                logged += [
                    (r.arrival, e)
                    for r in rows[key]
                    if r.event_time > self.published
                    for e in [_delete(r.payload)]
                ]
            else:
                out = self._step(key, rows.get(key, []), context)
            written += out
            self.late += sum(
                json.loads(r.row_json).get("late", 0) for r in out if r.kind == RowKind.STATS
            )
        self.log += logged
        self._merge(written)
        self.published = watermark

    def _merge(self, written: list[StepRow]) -> None:
        """Apply one batch's route-table changes by key, as one MERGE per table."""
        source: dict[str, dict[RowKey, tuple[str | None, Row]]] = defaultdict(dict)
        for out in written:
            if out.kind != RowKind.CHANGE or out.table is None:
                continue
            keys = spec(out.table).keys
            for row in bundle_rows(out.table, out.row_json):
                key = tuple(row[k] for k in keys)
                assert key not in source[out.table], (
                    f"two source rows of one key in a MERGE of {out.table}: {key}"
                )
                source[out.table][key] = (out.op, row)
        for table, changes in source.items():
            target = self.tables[table]
            for key, (op, row) in changes.items():
                if op == RowOp.DELETE:
                    target.pop(key, None)
                else:
                    target[key] = row
        if not self.config.per_topic:
            touched = {
                key[-1] for table in (TOPIC_BASE, TOPIC_OVERLAY) for key in source.get(table, {})
            }
            self._derive_topic_queue(touched)

    def _derive_topic_queue(self, groups: set[str]) -> None:
        """The writer's derivation: each touched group's topic_queue_table rows replaced by
        effective(base, overlay)."""
        if not groups:
            return
        base = {
            (key[1], key[0]): queue_of_row(row)
            for key, row in self.tables[TOPIC_BASE].items()
            if key[1] in groups
        }
        overlays = {
            key[0]: overlay_of_row(row)
            for key, row in self.tables[TOPIC_OVERLAY].items()
            if key[0] in groups
        }
        queue = self.tables[TOPIC_QUEUE]
        for key in [k for k in queue if k[1] in groups]:
            del queue[key]
        queue.update(topic_queue_rows(base, overlays))

    def _step(self, key: str, rows: list[InputRow], context: BatchContext) -> list:
        return self._step_result(key, rows, context).rows

    def _step_result(self, key: str, rows: list[InputRow], context: BatchContext) -> StepResult:
        """One group's step as the Spark adapter runs it, its state and wake-up kept."""
        deletes = [e for e in self.log if e[1].eventTime > self.published]
        result = step_group(
            key,
            self.states.get(key),
            rows,
            context,
            self.config,
            deletes,
            HeldContent(self.backend, self.min_chars),
        )
        if result.state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = result.state
        if result.wake_up is not None:
            self.wake_ups[key] = result.wake_up
        return result

    def finish(self, final: int) -> None:
        """No-data batches until the watermark reaches `final` (Spark's last batches)."""
        self.max_seen = max(self.max_seen, final + self.delay_ms)
        self.batch([])
        self.batch([])

    def dump(self) -> dict:
        """The published tables' canonical dump, once they are checked against the union of
        the groups' states."""
        groups = (
            decode_clock((s.clock, CONTENT.resolve(s.topics))).routes for s in self.states.values()
        )
        for table, state_rows in fleet_rows(groups).items():
            keys = TABLE_KEYS[table]
            in_state = {tuple(r[k] for k in keys): r for r in state_rows}
            assert len(in_state) == len(state_rows), f"two rows of one key in {table}"
            as_written = {k: json.loads(json.dumps(r)) for k, r in in_state.items()}
            assert self.tables[table] == as_written, f"{table}: published rows != groups' states"
        published = {t: list(rows.values()) for t, rows in self.tables.items()}
        return project(canonical_dump(published, self.published))


def _delete(payload: str) -> DeleteTopicEvent:
    from routing_lib.core.wire import unpack_event

    event = unpack_event(payload)
    assert isinstance(event, DeleteTopicEvent)
    return event


def run_model_in_batches(
    events: list[Event | TickEvent],
    rng: random.Random,
    delay_ms: int,
    content_refs: bool,
    max_batch: int = 40,
) -> StreamModel:
    model = StreamModel(delay_ms, content_refs)
    i = 0
    while i < len(events):
        size = rng.randint(1, max_batch)
        model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
        i += size
    model.finish(max(e.eventTime for e in events) - delay_ms)
    return model
