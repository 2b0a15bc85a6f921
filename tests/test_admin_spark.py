"""Administrative events through the real job (Spark + Delta): backfills split into
micro-batches, the admin_events log/audit table, and the KV table."""

from __future__ import annotations

import json
import random

import pytest
from deltalake import DeltaTable

from routing_lib.core.admin import ADMIN_EVENTS
from routing_lib.core.tables import KV_CONFIG, PROGRESS
from tests.support.helpers import (
    GOLDEN,
    expected_dump,
    fixture_lines,
    reference_dump,
    split_lines,
    write_files,
)

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    "name", ["14_write_perm_admin", "15_delete_topic_admin", "16_kv_config_admin"]
)
def test_admin_fixture_one_file_per_micro_batch(name, backfill, tmp_path):
    lines = fixture_lines(name)
    write_files(tmp_path / "in", split_lines(lines, 5, random.Random(3)))
    assert backfill([tmp_path / "in"], max_files_per_trigger=1) == expected_dump(name)
    progress = DeltaTable(str(backfill.warehouse / PROGRESS)).to_pyarrow_table().to_pylist()
    assert sum(r["input_rows"] for r in progress) == len(lines)
    assert sum(r["late"] for r in progress) == 0


def _tick(t: int) -> str:
    return json.dumps({"eventType": "TICK", "eventTime": t})


def test_idle_holder_loses_the_topic_deleted_in_a_later_batch(backfill, tmp_path):
    """broker-a has applied its registration and waits for nothing but its 120 s deadline when
    DELETE_TOPIC arrives (one file per micro-batch): only the fan-out wakes it in time."""
    register = fixture_lines("15_delete_topic_admin")[0]
    t0 = json.loads(register)["eventTime"]
    delete = json.dumps({"eventType": "DELETE_TOPIC", "eventTime": t0 + 15_000, "topic": "Orders"})
    chunks = [
        [register, _tick(t0 + 20_000)],
        [_tick(t0 + 21_000)],
        [_tick(t0 + 22_000)],
        [delete, _tick(t0 + 40_000)],
    ]
    write_files(tmp_path / "in", chunks)
    dump = backfill([tmp_path / "in"], max_files_per_trigger=1)
    assert dump["watermark"] == t0 + 30_000
    assert "Orders" not in dump["topicQueueTable"] and "TBW102" in dump["topicQueueTable"]
    assert dump == reference_dump([line for chunk in chunks for line in chunk])


def test_admin_events_table_records_every_admin_event(backfill):
    backfill(
        [
            GOLDEN / "16_kv_config_admin" / "events.jsonl",
            GOLDEN / "15_delete_topic_admin" / "events.jsonl",
        ]
    )
    rows = DeltaTable(str(backfill.warehouse / ADMIN_EVENTS)).to_pyarrow_table().to_pylist()
    by_type: dict[str, int] = {}
    for row in rows:
        by_type[row["event_type"]] = by_type.get(row["event_type"], 0) + 1
    assert by_type == {"PUT_KV": 5, "DELETE_KV": 3, "DELETE_TOPIC": 5}
    put = next(r for r in rows if r["event_type"] == "PUT_KV" and r["key"] == "pager")
    assert put["requested_by"] == "10.0.5.5:40000" and put["value"] == "+1-555-0100"
    assert put["source"].endswith("16_kv_config_admin/events.jsonl") and put["position"] == 4
    assert put["event_date"] == "2025-11-24"
    kv = DeltaTable(str(backfill.warehouse / KV_CONFIG)).to_pyarrow_table().to_pylist()
    # the emptied namespace stays as its namespace row
    assert {"namespace": "gone", "key": None, "value": None} in kv
    assert not any(r["namespace"] == "never" for r in kv)


@pytest.mark.parametrize(
    "seed,per_batch",
    [(7, True), (11, False)],
    ids=["one-file-per-batch", "shuffled-files-one-batch"],
)
def test_random_admin_history_split_into_files_equals_replay(seed, per_batch, backfill, tmp_path):
    """A seeded random fleet history with operators' events, cut into random files: one file
    per micro-batch in arrival order, or every file at once in shuffled order."""
    from tests.support.helpers import admin_history, set_mtimes

    lines = admin_history(seed)
    rng = random.Random(seed)
    paths = write_files(tmp_path / "in", split_lines(lines, 6, rng))
    if not per_batch:
        order = list(range(len(paths)))
        rng.shuffle(order)
        set_mtimes(paths, order)
    dump = backfill([tmp_path / "in"], max_files_per_trigger=1 if per_batch else None)
    assert dump == reference_dump(lines)
