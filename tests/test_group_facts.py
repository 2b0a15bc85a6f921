"""The step's group-level facts (routing_lib/core/group_facts.py, issue 36) against its rows.

Drawn and seeded histories in micro-batches through the shipped step (tests/support/
stream_model.py): the base rows and overlays kept from the facts give the published
topic_queue_table after every batch, and the normalised history (base-row intervals, overlay
intervals) gives topic_route_history row for row, as HistoryTracker's changes leave it. A
fault of a 10 000-topic group writes a handful of rows in that layout.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable

from hypothesis import given

from bench.group_fault_rows import FAULTS, FaultCounter, per_fault_rows, register_record
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_ROUTE_HISTORY
from routing_lib.core.fact_rows import fact_row, facts_of_rows
from routing_lib.core.group_facts import (
    GroupOverlayChange,
    NormalisedHistory,
    RouteState,
    topic_queue_rows,
    topic_route_history_rows,
)
from routing_lib.core.group_routes import DEFAULT_FLAGS, RouteFlags
from routing_lib.core.history import HISTORY_IDENTITY
from routing_lib.core.overlay import PermOp
from routing_lib.core.rows import RowKind, RowOp, StepRow
from routing_lib.core.step import (
    BatchContext,
    InputRow,
    StepConfig,
)
from routing_lib.core.tables import TOPIC_QUEUE, Row, RowKey
from schemas import parse_event
from tests.support.event_strategies import History, histories, profile
from tests.support.helpers import random_history, registration_modes, seeds
from tests.support.stream_model import StreamModel


class FactModel(StreamModel):
    """The stream model, also keeping what the steps' facts and history rows build."""

    def __init__(self, delay_ms: int, content_refs: bool, flags: RouteFlags) -> None:
        super().__init__(delay_ms, content_refs, flags)
        self.route_state = RouteState()
        self.normalised = NormalisedHistory()
        self.history: dict[RowKey, Row] = {}  # topic_route_history as the writer leaves it
        # the facts as topic_base_changes / topic_overlay_changes rows, through JSON
        self.change_rows: tuple[list[Row], list[Row]] = ([], [])

    def _step(self, key: str, rows: list[InputRow], context: BatchContext) -> list[StepRow]:
        result = self._step_result(key, rows, context)
        self.route_state.apply(result.facts)
        self.normalised.apply(result.facts)
        for fact in result.facts:
            table = self.change_rows[isinstance(fact, GroupOverlayChange)]
            table.append(json.loads(json.dumps(fact_row(fact))))
        self._history(result.rows)
        return result.rows

    def _history(self, out: Iterable[StepRow]) -> None:
        identity = HISTORY_IDENTITY[TOPIC_ROUTE_HISTORY]
        for step_row in out:
            if step_row.kind != RowKind.HISTORY or step_row.table != TOPIC_ROUTE_HISTORY:
                continue
            for row in json.loads(step_row.row_json):
                key = tuple(row[c] for c in identity)
                if step_row.op == RowOp.DELETE:
                    self.history.pop(key, None)
                elif step_row.op == RowOp.CLOSE:
                    self.history[key] = {**self.history[key], **row}
                else:
                    self.history[key] = row


def _history_rows(rows: Iterable[Row]) -> dict[RowKey, Row]:
    identity = HISTORY_IDENTITY[TOPIC_ROUTE_HISTORY]
    out = {}
    for row in rows:
        key = tuple(row[c] for c in identity)
        assert key not in out, f"two versions of one identity: {key}"
        out[key] = json.loads(json.dumps(row))
    return out


def _check(model: FactModel, history: bool = True) -> None:
    derived = topic_queue_rows(model.route_state.base, model.route_state.overlays)
    assert derived == model.tables[TOPIC_QUEUE], "base + overlay != published topic_queue_table"
    if not history:
        return
    want = _history_rows(model.history.values())
    got = _history_rows(topic_route_history_rows(model.normalised.base, model.normalised.overlay))
    assert got.keys() == want.keys()
    assert got == want
    # the same from the stored change rows (in no particular order)
    stored = NormalisedHistory()
    stored.apply(facts_of_rows(*(rows[::-1] for rows in model.change_rows)))
    assert _history_rows(topic_route_history_rows(stored.base, stored.overlay)) == want


def _run(history: History, every_batch: bool = True, with_history: bool = True) -> FactModel:
    """The model over the history; the derived tables checked after every batch (the history
    at the end only, unless `every_batch`; never without `with_history`: the step's facts are
    then its net change)."""
    events = [parse_event(json.dumps(record)) for record in history.records]
    model = FactModel(history.delay_ms, history.content_refs, history.flags)
    # the per-topic rows too: the reference the facts are compared with
    model.config = StepConfig(history.flags, history=with_history, per_topic_rows=True)
    every_batch = every_batch and with_history
    arrived = 0
    for batch in history.batches:
        model.batch([(events[arrived + n], ("file", arrived + n)) for n in range(len(batch))])
        arrived += len(batch)
        _check(model, every_batch)
    model.finish(max(max(e.eventTime for e in events) - history.delay_ms, 0))
    _check(model, with_history)
    return model


@profile()
@given(histories())
def test_drawn_histories_facts_give_the_published_tables_and_history(history: History) -> None:
    _run(history)


@profile()
@given(histories())
def test_without_history_the_net_facts_give_the_published_tables(history: History) -> None:
    _run(history, with_history=False)


def test_seeded_fleet_histories_facts_give_the_published_tables_and_history() -> None:
    from routelake_dev.simulator import with_admin_events

    overlay_facts = 0
    for seed in seeds(4):
        rng = random.Random(seed)
        records = registration_modes(random_history(seed, rng), rng)
        records = with_admin_events(records, seed, every=rng.randint(4, 12))
        sizes = [rng.randint(1, 40) for _ in range(len(records))]
        history = History(records, 10_000, sizes, DEFAULT_FLAGS, content_refs=seed % 2 == 0)
        model = _run(history, every_batch=False)
        overlay_facts += sum(len(v) for v in model.normalised.overlay.values())
    assert overlay_facts > 0


def test_the_group_layout_publishes_the_per_topic_layouts_tables() -> None:
    """The job's step (the default: the group layout) writes topic_base / topic_overlay and
    their change tables instead of per-topic rows; topic_queue_table derived from them per
    touched group (the writer's plan) is the table the per-topic layout's rows publish."""
    rng = random.Random(7)
    records = registration_modes(random_history(7, rng), rng)
    events = [parse_event(json.dumps(record)) for record in records]
    models = []
    for group_facts in (False, True):
        model = FactModel(10_000, True, DEFAULT_FLAGS)
        model.config = StepConfig(DEFAULT_FLAGS, group_facts=group_facts)
        assert model.config.per_topic is not group_facts
        rng = random.Random(8)
        i = 0
        while i < len(events):  # in micro-batches: topic_queue_table derived per batch
            size = rng.randint(1, 30)
            model.batch([(e, ("file", i + n)) for n, e in enumerate(events[i : i + size])])
            i += size
        model.finish(max(e.eventTime for e in events) - 10_000)
        models.append(model)
    per_topic, group_layout = models
    assert not per_topic.normalised.overlay and group_layout.normalised.overlay
    assert per_topic.history and not group_layout.history  # topic_route_history: derived
    assert not per_topic.tables[TOPIC_BASE] and group_layout.tables[TOPIC_BASE]
    assert per_topic.dump() == group_layout.dump()
    assert per_topic.tables[TOPIC_QUEUE] == group_layout.tables[TOPIC_QUEUE]


# ---- rows written per fault of a 10 000-topic group ---------------------------------------------
# (bench/group_fault_rows.py prints the same counts)


def test_a_fault_of_a_10000_topic_group_writes_at_most_ten_rows() -> None:
    counts = per_fault_rows(10_000)
    for fault in FAULTS:
        got = counts[fault]
        assert got["base facts"] == 0, (fault, got)
        assert got["overlay facts"] == 1, (fault, got)
        assert got["route rows"] <= 10 and got["history rows"] <= 10, (fault, got)
        # what the per-topic layout writes for the same fault
        assert got["today route rows"] >= 10_000 and got["today history rows"] >= 10_000
    change = counts["topic change (one changed, one added)"]
    assert change["base facts"] == 2 and change["overlay facts"] == 0, change
    assert change["route rows"] == 2 and change["history rows"] == 3, change
    assert counts["first registration"]["base facts"] == 10_000


def test_perm_ops_in_facts_follow_the_faults() -> None:
    counter = FaultCounter()
    counter.fault([register_record(1_000, "h:1", 0, 3)], 1_000)
    wipe = {"eventType": "WIPE_WRITE_PERM", "eventTime": 1_001, "brokerName": "big"}
    counter.fault([wipe], 1_001)
    assert counter.route_state.overlays["big"].perm_op is PermOp.WIPE
    counter.fault([{**wipe, "eventType": "ADD_WRITE_PERM", "eventTime": 1_002}], 1_002)
    assert counter.route_state.overlays["big"].perm_op is PermOp.RW
