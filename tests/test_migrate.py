"""`routectl migrate` (routing_lib/migrate.py, issue 36 item 6) on warehouses of the per-topic
layout written with delta-rs from the rows the shipped step writes in that layout
(StepConfig(group_facts=False), tests/support/stream_model.py).

After the migration, the group layout's tables derive the stored topic_queue_table and every
topic_route_history row, column for column; and the job going on from the same state in the
group layout (the model's steps, their rows applied to the migrated tables) publishes what a
job that never left the per-topic layout publishes, history included: the migrated bases and
overlays are the checkpoint's, so the first return of a group absent at migration time, or
an ADD after a WIPE, comes out right.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given

from routelake_dev.simulator import with_admin_events
from routing_lib import storage
from routing_lib.cli import main as routectl
from routing_lib.core.catalog import (
    PROGRESS,
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
    spec,
)
from routing_lib.core.fact_rows import base_row, fact_row, facts_of_rows, queue_of_row
from routing_lib.core.group_facts import (
    GroupOverlayChange,
    NormalisedHistory,
    topic_route_history_rows,
)
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.core.history import HISTORY_IDENTITY, event_date
from routing_lib.core.overlay import GroupTopics
from routing_lib.core.rows import RowKind, RowOp, StepRow
from routing_lib.core.step import BatchContext, InputRow, StepConfig
from routing_lib.core.tables import Row, RowKey
from routing_lib.layout import OldLayoutError, old_layout_reason, require_group_layout
from routing_lib.migrate import JobMayBeRunning, check_stopped, migrate
from routing_lib.migrate_facts import NotReproducible, migrate_group
from routing_lib.migrate_state import group_states
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.route_history import read_history
from routing_lib.read.warehouse import open_table
from schemas import parse_event
from tests.support.event_strategies import History, histories, profile
from tests.support.helpers import random_history, registration_modes, seeds
from tests.support.stream_model import StreamModel

PER_TOPIC = StepConfig(DEFAULT_FLAGS, group_facts=False)
GROUP_LAYOUT = StepConfig(DEFAULT_FLAGS)
CDF = {"delta.enableChangeDataFeed": "true"}


class Model(StreamModel):
    """The stream model, keeping topic_route_history as the per-topic writer leaves it and
    the change rows the group layout's steps emit."""

    def __init__(self, content_refs: bool) -> None:
        super().__init__(10_000, content_refs, DEFAULT_FLAGS)
        self.history: dict[RowKey, Row] = {}
        self.change_rows: dict[str, list[Row]] = {TOPIC_BASE_CHANGES: [], TOPIC_OVERLAY_CHANGES: []}

    def _step(self, key: str, rows: list[InputRow], context: BatchContext) -> list[StepRow]:
        result = self._step_result(key, rows, context)
        self.change_rows[TOPIC_BASE_CHANGES] += [
            fact_row(f) for f in result.facts if not isinstance(f, GroupOverlayChange)
        ]
        self.change_rows[TOPIC_OVERLAY_CHANGES] += [
            fact_row(f) for f in result.facts if isinstance(f, GroupOverlayChange)
        ]
        identity = HISTORY_IDENTITY[TOPIC_ROUTE_HISTORY]
        for out in result.rows:
            if out.kind != RowKind.HISTORY or out.table != TOPIC_ROUTE_HISTORY:
                continue
            for row in json.loads(out.row_json):
                k = tuple(row[c] for c in identity)
                if out.op == RowOp.DELETE:
                    self.history.pop(k, None)
                elif out.op == RowOp.CLOSE:
                    self.history[k] = {**self.history[k], **row}
                else:
                    self.history[k] = row
        return result.rows

    def group_states(self) -> dict[str, GroupTopics]:
        """The checkpoint's bases and overlays, as routectl migrate reads them."""
        return group_states(self.states)


def _batches(seed: int, renamed: dict[str, str] | None = None) -> tuple[list, list[int]]:
    """Seed `seed`'s history in random batch sizes; `renamed`: brokerNames replaced."""
    rng = random.Random(seed)
    records = registration_modes(random_history(seed, rng), rng)
    records = with_admin_events(records, seed, every=rng.randint(4, 12))
    renamed = renamed or {}
    for record in records:
        if record.get("brokerName") in renamed:
            record["brokerName"] = renamed[record["brokerName"]]
    events = [parse_event(json.dumps(r)) for r in records]
    sizes, total = [], 0
    while total < len(events):
        sizes.append(rng.randint(1, 40))
        total += sizes[-1]
    return events, sizes


def _run(model: Model, events: list, sizes: list[int], start: int, stop: int) -> None:
    arrived = sum(sizes[:start])
    for size in sizes[start:stop]:
        model.batch(
            [(e, ("file", arrived + n)) for n, e in enumerate(events[arrived : arrived + size])]
        )
        arrived += size


def _write(warehouse: Path | str, table: str, rows: Iterable[Row], partition: bool = True) -> None:
    """A table of the warehouse (a folder, or an s3:// prefix) written with delta-rs."""
    schema = arrow_schema(table)
    data = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)
    location = storage.join(str(warehouse), table)
    write_deltalake(
        storage.delta_uri(location),
        data,
        partition_by=list(spec(table).partition_by) if partition else None,
        configuration=CDF,
        storage_options=storage.delta_storage_options(location),
    )


def old_warehouse(warehouse: Path | str, model: Model, committed_at_ms: int = 1) -> None:
    """The per-topic layout as main wrote it before issue 36: topic_queue_table unpartitioned,
    topic_route_history stored, a progress row at the model's published watermark."""
    _write(warehouse, TOPIC_QUEUE, model.tables[TOPIC_QUEUE].values(), partition=False)
    _write(warehouse, TOPIC_ROUTE_HISTORY, model.history.values())
    _write(
        warehouse,
        PROGRESS,
        [{"batch_id": 0, "watermark": model.published, "committed_at_ms": committed_at_ms}],
    )


def _read(warehouse: Path | str, table: str) -> list[Row]:
    delta = storage.open_delta(storage.join(str(warehouse), table))
    rows: list[Row] = delta.to_pyarrow_table().to_pylist()
    return rows


def _by_identity(rows: Iterable[Row]) -> dict[tuple, Row]:
    identity = HISTORY_IDENTITY[TOPIC_ROUTE_HISTORY]
    columns = spec(TOPIC_ROUTE_HISTORY).column_names
    return {tuple(r[c] for c in identity): {c: r.get(c) for c in columns} for r in rows}


def _derived_history(base_changes: list[Row], overlay_changes: list[Row]) -> dict[tuple, Row]:
    normalised = NormalisedHistory()
    normalised.apply(facts_of_rows(base_changes, overlay_changes))
    return _by_identity(topic_route_history_rows(normalised.base, normalised.overlay))


def _keyed(rows: Iterable[Row], table: str) -> dict[tuple, Row]:
    keys = spec(table).keys
    return {tuple(r[k] for k in keys): r for r in rows}


@pytest.mark.parametrize("seed", seeds(3))
def test_migrated_warehouse_derives_the_stored_tables_and_the_job_goes_on(
    tmp_path: Path, seed: int
) -> None:
    events, sizes = _batches(seed)
    cut = len(sizes) // 2
    model, reference = Model(seed % 2 == 0), Model(seed % 2 == 0)
    model.config, reference.config = PER_TOPIC, PER_TOPIC
    _run(model, events, sizes, 0, cut)
    old_warehouse(tmp_path, model)
    assert old_layout_reason(tmp_path) is not None
    with pytest.raises(OldLayoutError, match="routectl migrate --warehouse"):
        require_group_layout(tmp_path)

    states = model.group_states()
    assert any(not s.overlay.is_trivial() for s in states.values())  # absent or wiped groups
    report = migrate(tmp_path, states)

    assert report.history_rows == len(model.history) > 0 and not report.already
    require_group_layout(tmp_path)  # migrated
    queue = DeltaTable(str(tmp_path / TOPIC_QUEUE))
    assert queue.metadata().partition_columns == ["broker_name"]
    assert queue.metadata().configuration == CDF
    assert _keyed(_read(tmp_path, TOPIC_QUEUE), TOPIC_QUEUE) == model.tables[TOPIC_QUEUE]
    assert DeltaTable(str(tmp_path / TOPIC_QUEUE), version=0).to_pyarrow_table().num_rows == len(
        model.tables[TOPIC_QUEUE]
    )  # the per-topic versions stay readable
    base_changes = _read(tmp_path, TOPIC_BASE_CHANGES)
    overlay_changes = _read(tmp_path, TOPIC_OVERLAY_CHANGES)
    assert _derived_history(base_changes, overlay_changes) == _by_identity(model.history.values())

    # The job goes on in the group layout from the same checkpoint state and the migrated
    # tables; the reference never left the per-topic layout.
    _run(reference, events, sizes, 0, len(sizes))
    model.config = GROUP_LAYOUT
    model.tables[TOPIC_BASE] = _keyed(_read(tmp_path, TOPIC_BASE), TOPIC_BASE)
    model.tables[TOPIC_OVERLAY] = _keyed(_read(tmp_path, TOPIC_OVERLAY), TOPIC_OVERLAY)
    _run(model, events, sizes, cut, len(sizes))
    assert model.tables[TOPIC_QUEUE] == reference.tables[TOPIC_QUEUE]
    got = _derived_history(
        base_changes + model.change_rows[TOPIC_BASE_CHANGES],
        overlay_changes + model.change_rows[TOPIC_OVERLAY_CHANGES],
    )
    want = _by_identity(reference.history.values())
    assert got.keys() == want.keys()
    assert got == want


def _per_topic_run(
    seed: int, content_refs: bool = False, renamed: dict[str, str] | None = None
) -> Model:
    """The model after every batch of seed `seed`'s history, stepped in the per-topic layout
    (what a warehouse of before issue 36 holds)."""
    events, sizes = _batches(seed, renamed)
    model = Model(content_refs)
    model.config = PER_TOPIC
    _run(model, events, sizes, 0, len(sizes))
    return model


def test_a_second_migration_changes_nothing(tmp_path: Path) -> None:
    model = _per_topic_run(11, content_refs=True)
    old_warehouse(tmp_path, model)
    migrate(tmp_path, model.group_states())
    versions = {t: DeltaTable(str(tmp_path / t)).version() for t in (TOPIC_QUEUE, TOPIC_BASE)}
    again = migrate(tmp_path, model.group_states())
    assert again.already
    assert {t: DeltaTable(str(tmp_path / t)).version() for t in versions} == versions


def test_a_group_name_no_folder_can_hold_is_migrated(tmp_path: Path) -> None:
    """A brokerName of 255 characters of anything (the schema's limit) is no Hive folder name
    (percent-encoded, far past a file name's 255 bytes): its rows are placed at the job's
    g=<sha1> folder, the partition value in the log, and read back as the same rows."""
    odd = ("ü/ %=" * 51)[:255]
    model = _per_topic_run(15, renamed={"broker-0": odd})
    assert any(row["broker_name"] == odd for row in model.tables[TOPIC_QUEUE].values())
    old_warehouse(tmp_path, model)
    migrate(tmp_path, model.group_states())
    require_group_layout(tmp_path)
    assert _keyed(_read(tmp_path, TOPIC_QUEUE), TOPIC_QUEUE) == model.tables[TOPIC_QUEUE]
    odd_base = [r for r in _read(tmp_path, TOPIC_BASE) if r["broker_name"] == odd]
    state = model.group_states()[odd]
    assert odd_base and _keyed(odd_base, TOPIC_BASE) == _keyed(
        [base_row(odd, topic, queue) for topic, queue in dict(state.base.rows()).items()],
        TOPIC_BASE,
    )
    for table in (TOPIC_QUEUE, TOPIC_BASE):
        files = pa.table(
            DeltaTable(str(tmp_path / table)).get_add_actions(flatten=True)
        ).to_pylist()
        odd_files = [f["path"] for f in files if f["partition.broker_name"] == odd]
        assert odd_files and all(p.startswith("g=") for p in odd_files)
    assert migrate(tmp_path, model.group_states()).already


def test_a_migration_stopped_half_way_is_done_again(tmp_path: Path) -> None:
    model = _per_topic_run(12)
    old_warehouse(tmp_path, model)
    migrate(tmp_path, model.group_states())
    # as if it had stopped before its last write (topic_base marks a finished migration)
    shutil.rmtree(tmp_path / TOPIC_BASE)
    assert old_layout_reason(tmp_path) is not None
    migrate(tmp_path, model.group_states())
    assert _keyed(_read(tmp_path, TOPIC_QUEUE), TOPIC_QUEUE) == model.tables[TOPIC_QUEUE]
    derived = _derived_history(
        _read(tmp_path, TOPIC_BASE_CHANGES), _read(tmp_path, TOPIC_OVERLAY_CHANGES)
    )
    assert derived == _by_identity(model.history.values())


def test_a_history_that_cannot_be_derived_stops_the_migration(tmp_path: Path) -> None:
    model = _per_topic_run(13)
    key, row = next((k, r) for k, r in model.history.items() if r["valid_to"] is not None)
    model.history[key] = {**row, "ended_by": "SOMETHING_ELSE"}
    old_warehouse(tmp_path, model)
    with pytest.raises(NotReproducible, match="SOMETHING_ELSE"):
        migrate(tmp_path, model.group_states())
    assert not (tmp_path / TOPIC_BASE).exists()  # nothing written
    assert not (tmp_path / TOPIC_BASE_CHANGES).exists()


def test_a_state_that_disagrees_with_the_tables_stops_the_migration(tmp_path: Path) -> None:
    model = _per_topic_run(14)
    old_warehouse(tmp_path, model)
    states = model.group_states()
    present = next(g for g, s in states.items() if s.overlay.present and len(s.base))
    del states[present]
    with pytest.raises(NotReproducible, match=present):
        migrate(tmp_path, states)


def test_a_recent_batch_or_one_in_flight_refuses(tmp_path: Path) -> None:
    model = Model(False)
    old_warehouse(tmp_path, model, committed_at_ms=int(time.time() * 1000))
    with pytest.raises(JobMayBeRunning, match="stop it first"):
        check_stopped(str(tmp_path), None)
    check_stopped(str(tmp_path), None, quiet_s=0)
    checkpoint = tmp_path / "checkpoint"
    for folder, ids in (("offsets", (0, 1, 2)), ("commits", (0, 1))):
        (checkpoint / folder).mkdir(parents=True)
        for n in ids:
            (checkpoint / folder / str(n)).write_text("v1\n{}")
    with pytest.raises(JobMayBeRunning, match="batch 2 was started and not committed"):
        check_stopped(str(tmp_path), str(checkpoint), quiet_s=0)
    (checkpoint / "commits" / "2").write_text("v1\n{}")
    check_stopped(str(tmp_path), str(checkpoint), quiet_s=0)


# ---- the command, and the stop of the readers on an unmigrated warehouse -----------------------


def _old(tmp_path: Path, seed: int) -> tuple[Path, Path, Model]:
    model = _per_topic_run(seed)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    old_warehouse(warehouse, model)
    checkpoint.mkdir()  # a job that never saved a state: bases from topic_queue_table
    return warehouse, checkpoint, model


def test_the_readers_stop_on_an_unmigrated_warehouse_naming_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse, checkpoint, _ = _old(tmp_path, 15)
    with pytest.raises(OldLayoutError, match=f"routectl migrate --warehouse {warehouse}"):
        read_history(warehouse)  # topic_route_history: derived from tables it lacks
    with pytest.raises(OldLayoutError, match="per-topic layout"):
        open_table(warehouse, TOPIC_BASE)
    assert routectl(["history", "topic", "t0", "--warehouse", str(warehouse)]) == 1
    assert f"routectl migrate --warehouse {warehouse}" in capsys.readouterr().err


def test_the_job_stops_on_an_unmigrated_warehouse_before_creating_a_table(tmp_path: Path) -> None:
    from routing_lib.spark.delta_writer import ensure_tables

    warehouse, _, _ = _old(tmp_path, 20)
    before = sorted(p.name for p in warehouse.iterdir())
    with pytest.raises(OldLayoutError, match="routectl migrate"):
        ensure_tables(str(warehouse))
    assert sorted(p.name for p in warehouse.iterdir()) == before


def test_routectl_migrate_then_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse, checkpoint, model = _old(tmp_path, 16)
    args = ["migrate", "--warehouse", str(warehouse), "--checkpoint", str(checkpoint)]
    assert routectl([*args, "--dry-run"]) == 0
    assert "would write topic_base" in capsys.readouterr().out
    assert not (warehouse / TOPIC_BASE).exists()
    assert routectl(args) == 0
    out = capsys.readouterr().out
    assert f"{len(model.history)} topic_route_history rows" in out and "wrote topic_base" in out
    assert _keyed(_read(warehouse, TOPIC_QUEUE), TOPIC_QUEUE) == model.tables[TOPIC_QUEUE]
    assert routectl(args) == 0
    assert "already of the group layout, nothing to do" in capsys.readouterr().out


def test_routectl_migrate_names_the_backfill_when_history_cannot_be_derived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse, checkpoint, model = _old(tmp_path, 17)
    shutil.rmtree(warehouse / TOPIC_ROUTE_HISTORY)
    _write(warehouse, TOPIC_ROUTE_HISTORY, [])  # a job that ran without history
    args = ["migrate", "--warehouse", str(warehouse), "--checkpoint", str(checkpoint)]
    assert routectl(args) == 1
    err = capsys.readouterr().err
    assert "nothing was written" in err and "routectl backfill" in err
    assert not (warehouse / TOPIC_BASE).exists()


def test_routectl_migrate_wants_the_checkpoint_or_without_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse, checkpoint, model = _old(tmp_path, 18)
    checkpoint.rmdir()
    args = ["migrate", "--warehouse", str(warehouse), "--checkpoint", str(checkpoint)]
    assert routectl(args) == 2
    assert "--without-state" in capsys.readouterr().err
    assert not (warehouse / TOPIC_BASE).exists()
    assert routectl([*args, "--without-state"]) == 0
    assert "from topic_queue_table (trivial)" in capsys.readouterr().out
    assert _keyed(_read(warehouse, TOPIC_BASE), TOPIC_BASE) == _keyed(
        model.tables[TOPIC_QUEUE].values(), TOPIC_BASE
    )


@profile()
@given(histories())
def test_drawn_histories_derive_back_and_go_on(history: History) -> None:
    """Drawn histories (every event type, same-instant flips, split registrations): each
    group's stored versions as facts derive back row for row with its state's anchor, and
    the derivation of those facts plus the group layout's next facts is the per-topic job's
    history."""
    events = [parse_event(json.dumps(record)) for record in history.records]
    batches = history.batches
    cut = len(batches) // 2
    model, reference = Model(history.content_refs), Model(history.content_refs)
    model.config = reference.config = StepConfig(history.flags, group_facts=False)
    arrived = 0
    for n, batch in enumerate(batches):
        items = [(events[arrived + i], ("file", arrived + i)) for i in range(len(batch))]
        reference.batch(items)
        if n == cut:
            migrated = _migrate_in_memory(model)
            model.config = StepConfig(history.flags)
        model.batch(items)
        arrived += len(batch)
    if cut >= len(batches):
        return
    got = _derived_history(
        migrated[TOPIC_BASE_CHANGES] + model.change_rows[TOPIC_BASE_CHANGES],
        migrated[TOPIC_OVERLAY_CHANGES] + model.change_rows[TOPIC_OVERLAY_CHANGES],
    )
    assert got == _by_identity(reference.history.values())


def _migrate_in_memory(model: Model) -> dict[str, list[Row]]:
    """migrate's per-group work without Delta: the change rows, each group checked."""
    states = model.group_states()
    columns = spec(TOPIC_ROUTE_HISTORY).column_names
    at = max([model.published, *(r["valid_to"] or r["valid_from"] for r in model.history.values())])
    out: dict[str, list[Row]] = {TOPIC_BASE_CHANGES: [], TOPIC_OVERLAY_CHANGES: []}
    queue = model.tables[TOPIC_QUEUE].values()
    for group in sorted({r["broker_name"] for r in model.history.values()} | states.keys()):
        rows = [r for r in model.history.values() if r["broker_name"] == group]
        effective = {r["topic"]: queue_of_row(r) for r in queue if r["broker_name"] == group}
        done = migrate_group(group, rows, effective, states.get(group), at, columns)
        assert not done.problems, done.problems
        for fact in done.facts:
            table = (
                TOPIC_OVERLAY_CHANGES
                if isinstance(fact, GroupOverlayChange)
                else TOPIC_BASE_CHANGES
            )
            out[table].append(fact_row(fact))
    return out


# ---- boundaries the shipped tracker does not write, but a pruned or hand-made history may ------


def _version(start: int, end: int | None, perm: int, started: tuple, ended: tuple | None) -> Row:
    """A topic_route_history row of topic t / group g; `started`, `ended`: (reason, kind,
    address)."""
    return {
        "topic": "t",
        "broker_name": "g",
        "valid_from": start,
        "valid_to": end,
        "read_queue_nums": 4,
        "write_queue_nums": 4,
        "perm": perm,
        "topic_sys_flag": 0,
        "started_by": started[0],
        "start_event": started[1],
        "start_broker_addr": started[2],
        "ended_by": ended[0] if ended else None,
        "end_event": ended[1] if ended else None,
        "end_broker_addr": ended[2] if ended else None,
        "event_date": event_date(start),
    }


ADDED = ("TOPIC_ADDED", "REGISTER", "a:1")
CHANGED_A = ("CONFIG_CHANGED", "REGISTER", "a:1")
CHANGED_B = ("CONFIG_CHANGED", "REGISTER", "b:1")
REMOVED = ("GROUP_REMOVED", "EXPIRE", "a:1")
WIPED = ("PERM_WIPED", "ACTING_MASTER", "b:1")


@pytest.mark.parametrize(
    "versions",
    [
        # ends and starts at one instant by different causes, neither side kept
        [_version(1, 5, 6, ADDED, REMOVED), _version(5, None, 6, ADDED, None)],
        # both sides kept, by different causes: through a placeholder row
        [_version(1, 5, 6, ADDED, CHANGED_A), _version(5, None, 4, CHANGED_B, None)],
        # the same row on both sides of a kept boundary
        [_version(1, 5, 6, ADDED, CHANGED_A), _version(5, None, 6, CHANGED_A, None)],
        # removed, then back with a kept reason at the same instant
        [_version(1, 5, 6, ADDED, REMOVED), _version(5, None, 4, WIPED, None)],
        # a kept end with nothing after it, a kept start with nothing before it (pruned)
        [_version(1, 5, 6, CHANGED_A, CHANGED_A), _version(9, None, 6, WIPED, None)],
    ],
)
def test_boundaries_the_tracker_does_not_write_derive_back(versions: list[Row]) -> None:
    columns = spec(TOPIC_ROUTE_HISTORY).column_names
    effective = {"t": queue_of_row(versions[-1])}
    done = migrate_group("g", versions, effective, None, 10, columns)
    assert not done.problems, done.problems
    assert len({(f.event_time, f.seq) for f in done.facts}) == len(done.facts)
