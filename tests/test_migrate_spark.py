"""The checkpoint's group states as `routectl migrate` reads them (routing_lib/migrate_state.py):
Spark's state data source over a real applyInPandasWithState checkpoint with the job's state
schema (spark/stateful.py STATE_SCHEMA), holding the states the shipped step saved (content
references in the checkpoint's content folder, as the job stores them)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from routelake_dev.simulator import with_admin_events
from routing_lib.content_files import CONTENT_FOLDER, ContentFolder
from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.content import CONTENT, is_ref
from routing_lib.jobs.backfill import default_checkpoint, run_backfill
from routing_lib.layout import OldLayoutError
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.snapshots import load_index
from routing_lib.migrate import migrate
from routing_lib.migrate_state import checkpoint_states, has_state
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.route_history import read_history
from routing_lib.read.warehouse import WarehouseSnapshot, load_snapshot
from routing_lib.spark.stateful import STATE_SCHEMA
from tests.support.helpers import random_history, registration_modes, write_files
from tests.test_lookup_snapshots import same_answers
from tests.test_migrate import PER_TOPIC, Model, _batches, _run

pytestmark = pytest.mark.spark

INPUT_SCHEMA = "group_key STRING, clock STRING, topics STRING, history STRING, topic_history STRING"


def _keep(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """Save the group's last input row as its state, as the job's step saves a SavedGroup."""
    for frame in frames:
        last = frame.iloc[-1]
        state.update((last["clock"], last["topics"], last["history"], last["topic_history"]))
    yield pd.DataFrame({"group_key": [key[0]]})


def test_the_checkpoints_group_states_read_as_the_step_saved_them(spark, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    model = Model(True)
    model.backend = CONTENT.attach(ContentFolder(str(checkpoint / CONTENT_FOLDER)))
    model.config = PER_TOPIC
    events, sizes = _batches(21)
    _run(model, events, sizes, 0, len(sizes))
    want = model.group_states()
    assert any(not s.overlay.is_trivial() for s in want.values())
    assert any(is_ref(s.topics) for s in model.states.values())  # in the content folder
    assert any((checkpoint / CONTENT_FOLDER).rglob("*"))
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "states.json").write_text(
        "\n".join(json.dumps({"group_key": g, **asdict(s)}) for g, s in model.states.items())
    )
    assert not has_state(str(checkpoint))

    query = (
        spark.readStream.schema(INPUT_SCHEMA)
        .json(str(inputs))
        .groupBy("group_key")
        .applyInPandasWithState(
            _keep, "group_key STRING", STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout
        )
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    assert has_state(str(checkpoint))
    assert checkpoint_states(spark, str(checkpoint)) == want


def _to_per_topic(warehouse: Path) -> None:
    """A group-layout warehouse rewritten as the per-topic layout main wrote before issue 36:
    topic_queue_table unpartitioned with the same rows, topic_route_history stored (the rows
    the per-topic job writes: the derived ones), the group layout's four tables gone."""
    queue = DeltaTable(str(warehouse / TOPIC_QUEUE)).to_pyarrow_table()
    write_deltalake(
        str(warehouse / TOPIC_QUEUE),
        queue,
        mode="overwrite",
        schema_mode="overwrite",
        partition_by=[],
    )
    assert DeltaTable(str(warehouse / TOPIC_QUEUE)).metadata().partition_columns == []
    history = read_history(warehouse)
    assert history.num_rows > 0
    write_deltalake(
        str(warehouse / TOPIC_ROUTE_HISTORY),
        history.select(arrow_schema(TOPIC_ROUTE_HISTORY).names).cast(
            arrow_schema(TOPIC_ROUTE_HISTORY)
        ),
        partition_by=["event_date"],
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    for table in (TOPIC_BASE, TOPIC_OVERLAY, TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES):
        shutil.rmtree(warehouse / table)


def _history(warehouse: Path) -> list[dict]:
    rows = read_history(warehouse).to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["broker_name"], r["valid_from"]))


def test_a_migrated_warehouse_goes_on_with_the_job(spark, config, tmp_path: Path) -> None:
    """The backfill job over the first file, its warehouse turned into the per-topic layout,
    migrated with the checkpoint's states, then the job over the second file on the same
    checkpoint: the same tables and history as the job over both files, one per batch."""
    rng = random.Random(31)
    records = with_admin_events(registration_modes(random_history(31, rng), rng), 31, every=6)
    lines = [json.dumps(r) for r in records]
    cut = len(lines) // 2
    both, growing = tmp_path / "both", tmp_path / "growing"
    write_files(both, [lines[:cut], lines[cut:]])
    straight, migrated = tmp_path / "straight", tmp_path / "migrated"
    run_backfill(config, [str(both)], str(straight), max_files_per_trigger=1, spark=spark)
    write_files(growing, [lines[:cut]])
    run_backfill(config, [str(growing)], str(migrated), spark=spark)
    _to_per_topic(migrated)
    with pytest.raises(OldLayoutError):
        read_history(migrated)
    checkpoint = default_checkpoint(str(migrated))
    states = checkpoint_states(spark, checkpoint)
    assert any(not s.overlay.is_trivial() for s in states.values())
    stored = DeltaTable(str(migrated / TOPIC_ROUTE_HISTORY)).to_pyarrow_table().to_pylist()
    before = sorted(stored, key=lambda r: (r["topic"], r["broker_name"], r["valid_from"]))

    report = migrate(migrated, states)

    assert report.from_state and report.history_rows == len(before)
    assert _history(migrated) == before
    _lookup_serves_the_snapshot(migrated)
    write_files(growing, [lines[cut:]], prefix="later")  # the second file arrives
    run_backfill(config, [str(growing)], str(migrated), max_files_per_trigger=1, spark=spark)
    assert load_snapshot(migrated).dump() == load_snapshot(straight).dump()
    assert _history(migrated) == _history(straight)
    _lookup_serves_the_snapshot(migrated)


def _lookup_serves_the_snapshot(warehouse: Path) -> None:
    """The lookup, serving topicQueueTable from topic_base + topic_overlay, answers as the
    per-topic snapshot (topic_queue_table) says."""
    pinned = settled_versions(warehouse)[0]
    snapshot = load_snapshot(warehouse)
    reference = RouteIndex(WarehouseSnapshot(snapshot.tables, pinned, snapshot.watermark))
    same_answers(load_index(warehouse, pinned), reference)
