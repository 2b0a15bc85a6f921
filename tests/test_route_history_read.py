"""topic_route_history derived from the change tables (routing_lib/read/route_history.py).

Drawn and seeded histories through the shipped step (tests/support/stream_model.py, facts
on): the facts' rows are written to real Delta tables with delta-rs (topic_base_changes,
topic_overlay_changes, as the job stores them), and what the readers derive from them equals
HistoryTracker's topic_route_history row for row: the whole table, one topic's history
(pushed down), filtered reads, and topicQueueTable at T by the as-of path (the last base row
and overlay at or before T) at every instant where State(T) can change.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given

from routing_lib.core.as_of import route_rows_as_of
from routing_lib.core.catalog import (
    PROGRESS,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.fact_rows import fact_row
from routing_lib.core.group_facts import BaseRowChange, GroupFact, GroupOverlayChange
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.history import HISTORY_IDENTITY
from routing_lib.core.overlay import PermOp
from routing_lib.core.step import StepConfig
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData
from routing_lib.layout import OldLayoutError
from routing_lib.read import route_history as rh
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import WarehouseError
from schemas import parse_event
from tests.support.event_strategies import History, histories, profile
from tests.support.helpers import random_history, registration_modes, seeds
from tests.test_group_facts import FactModel


def _model(history: History) -> FactModel:
    """The history through the step in its micro-batches, facts and tracker rows kept."""
    events = [parse_event(json.dumps(record)) for record in history.records]
    model = FactModel(history.delay_ms, history.content_refs, history.flags)
    # the per-topic rows too: HistoryTracker's topic_route_history is the reference
    model.config = StepConfig(history.flags, per_topic_rows=True)
    arrived = 0
    for batch in history.batches:
        model.batch([(events[arrived + n], ("file", arrived + n)) for n in range(len(batch))])
        arrived += len(batch)
    model.finish(max(max(e.eventTime for e in events) - history.delay_ms, 0))
    return model


def write_changes(root: Path, base: list[Row], overlay: list[Row], batches: int = 2) -> None:
    """The change rows as the job appends them: a few commits per table (rows shuffled)."""
    rng = random.Random(len(base) + len(overlay))
    for table, rows in ((TOPIC_BASE_CHANGES, base), (TOPIC_OVERLAY_CHANGES, overlay)):
        rows = rows[:]
        rng.shuffle(rows)
        schema = arrow_schema(table)
        write_deltalake(root / table, schema.empty_table(), partition_by=["event_date"])
        for n in range(batches):
            part = rows[n::batches]
            if part:
                write_deltalake(root / table, pa.Table.from_pylist(part, schema), mode="append")
    write_deltalake(root / PROGRESS, arrow_schema(PROGRESS).empty_table())


def _keyed(rows: Iterable[Row]) -> dict[tuple, Row]:
    identity = HISTORY_IDENTITY[TOPIC_ROUTE_HISTORY]
    out: dict[tuple, Row] = {}
    for row in rows:
        key = tuple(row[c] for c in identity)
        assert key not in out, key
        out[key] = json.loads(json.dumps(row))
    return out


def _queue_key(rows: Iterable[Row]) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in rows)


def _instants(want: Iterable[Row], model: FactModel) -> list[int]:
    """Every time State(T) can change, and one ms either side."""
    times: set[int] = set()
    for row in want:
        times.add(row["valid_from"])
        if row["valid_to"] is not None:
            times.add(row["valid_to"])
    for rows in model.change_rows:
        times.update(r["event_time"] for r in rows)
    return sorted({t + d for t in times for d in (-1, 0, 1)})


def check_reads(model: FactModel, root: Path) -> None:
    base, overlay = model.change_rows
    write_changes(root, base, overlay)
    want = _keyed(model.history.values())
    changes = rh.read_changes(root)
    assert _keyed(rh.history_rows(changes)) == want
    assert _keyed(rh.read_history(root).to_pylist()) == want
    topics = {row["topic"] for row in want.values()} | {"absent-topic"}
    for topic in sorted(topics):
        mine = {k: v for k, v in want.items() if v["topic"] == topic}
        assert _keyed(rh.topic_history_rows(root, topic)) == mine, topic
        assert _keyed(rh.history_rows(rh.of_topic(changes, topic))) == mine, topic
        filtered = rh.read_history(root, [("topic", "=", topic), ("valid_from", ">", 0)])
        assert _keyed(filtered.to_pylist()) == mine
    groups = sorted({row["broker_name"] for row in want.values()})
    if groups:
        got = rh.read_history(root, [("broker_name", "in", groups[:1])]).to_pylist()
        assert _keyed(got) == {k: v for k, v in want.items() if v["broker_name"] == groups[0]}
    history = {TOPIC_ROUTE_HISTORY: list(want.values())}
    instants = _instants(want.values(), model)
    prepared = rh.base_intervals(changes)
    from_disk = set(random.Random(len(instants)).sample(instants, min(8, len(instants))))
    for t in instants:
        expected = _queue_key(route_rows_as_of(history, t)[TOPIC_QUEUE])
        assert _queue_key(rh.routes_at(changes, t).to_pylist()) == expected, t
        # prepared once for every T (the console's path)
        assert _queue_key(rh.routes_at(prepared, t).to_pylist()) == expected, t
        if t in from_disk:  # the read pushes event_time <= t down
            assert _queue_key(rh.route_rows_at(root, t)) == expected, t


@profile()
@given(histories())
def test_drawn_histories_derived_from_delta_equal_the_tracker(history: History) -> None:
    model = _model(history)
    with tempfile.TemporaryDirectory() as root:
        check_reads(model, Path(root))


def test_seeded_fleet_histories_derived_from_delta_equal_the_tracker(tmp_path: Path) -> None:
    from routelake_dev.simulator import with_admin_events

    checked = 0
    for seed in seeds(3):
        rng = random.Random(seed)
        records = registration_modes(random_history(seed, rng), rng)
        records = with_admin_events(records, seed, every=rng.randint(4, 12))
        sizes = [rng.randint(1, 40) for _ in range(len(records))]
        history = History(records, 10_000, sizes, DEFAULT_FLAGS, content_refs=seed % 2 == 0)
        model = _model(history)
        check_reads(model, tmp_path / str(seed))
        checked += len(model.history)
    assert checked > 0


def test_an_old_warehouse_is_told_to_migrate(tmp_path: Path) -> None:
    """A warehouse with a stored topic_route_history and no change tables (written before
    issue 36) is a clear stop naming `routectl migrate`, not an empty history."""
    root = tmp_path / "old"
    write_deltalake(root / PROGRESS, arrow_schema(PROGRESS).empty_table())
    write_deltalake(root / TOPIC_ROUTE_HISTORY, arrow_schema(TOPIC_ROUTE_HISTORY).empty_table())
    with pytest.raises(OldLayoutError, match="routectl migrate"):
        rh.read_changes(root)
    (tmp_path / "bare").mkdir()
    write_deltalake(tmp_path / "bare" / PROGRESS, arrow_schema(PROGRESS).empty_table())
    with pytest.raises(WarehouseError, match="no topic_base_changes"):
        rh.read_history(tmp_path / "bare")


def test_a_covered_overlay_under_a_perm_op_at_t(tmp_path: Path) -> None:
    """A split registration's return in progress (covered: some of the base) under WIPE, and
    a group with no overlay row: the as-of path equals the derived history at each T."""
    cause = ("REGISTER", "h:1")
    queue = QueueData(4, 4, 6, 0)
    facts: list[GroupFact] = [
        *(BaseRowChange("g", topic, queue, 1, 0, cause) for topic in ("A", "B", "C")),
        BaseRowChange("other", "A", QueueData(2, 2, 6, 0), 1, 0, cause),
        GroupOverlayChange("g", False, PermOp.ID, None, 5, 0, ("EXPIRED", "h:1")),
        GroupOverlayChange("g", True, PermOp.ID, frozenset({"A", "C"}), 9, 0, cause),
        GroupOverlayChange("g", True, PermOp.WIPE, frozenset({"A", "C"}), 9, 1, ("WIPE", None)),
        GroupOverlayChange("g", True, PermOp.WIPE, None, 12, 0, cause),
        BaseRowChange("g", "B", None, 14, 0, ("DELETE_TOPIC", None)),
    ]
    base = [fact_row(f) for f in facts if isinstance(f, BaseRowChange)]
    overlay = [fact_row(f) for f in facts if isinstance(f, GroupOverlayChange)]
    changes = rh.ChangeTables(
        pa.Table.from_pylist(base, arrow_schema(TOPIC_BASE_CHANGES)),
        pa.Table.from_pylist(overlay, arrow_schema(TOPIC_OVERLAY_CHANGES)),
    )
    history = {TOPIC_ROUTE_HISTORY: rh.history_rows(changes)}
    shown = {}
    for t in range(0, 16):
        expected = route_rows_as_of(history, t)[TOPIC_QUEUE]
        got = rh.routes_at(changes, t).to_pylist()
        assert _queue_key(got) == _queue_key(expected), t
        assert _queue_key(rh.routes_at(rh.base_intervals(changes), t).to_pylist()) == _queue_key(
            got
        )
        shown[t] = sorted((r["broker_name"], r["topic"], r["perm"]) for r in got)
    assert shown[9] == [("g", "A", 4), ("g", "C", 4), ("other", "A", 6)]
    assert shown[12] == [("g", "A", 4), ("g", "B", 4), ("g", "C", 4), ("other", "A", 6)]
    assert shown[6] == [("other", "A", 6)] and shown[14] == [
        ("g", "A", 4),
        ("g", "C", 4),
        ("other", "A", 6),
    ]
