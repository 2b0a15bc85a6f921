"""The backfill (file stream + AvailableNow through the streaming pipeline) on real Spark and
Delta: golden fixtures, batch boundaries, file order, re-runs, --as-of."""

from __future__ import annotations

import json
import random

import pytest
from deltalake import DeltaTable

from routing_lib.core.tables import PROGRESS, ROUTE_TABLES
from routing_lib.read.warehouse import table_versions
from tests.support.helpers import (
    FIXTURES,
    GOLDEN,
    expected_dump,
    fixture_lines,
    random_history,
    reference_dump,
    set_mtimes,
    split_lines,
    write_files,
)
from tests.support.lookup_check import assert_lookup_matches_dump

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("name", FIXTURES)
def test_backfill_matches_expected_and_lookup_serves_it(name, backfill):
    dump = backfill([GOLDEN / name / "events.jsonl"])
    assert dump == expected_dump(name)
    # The lookup service over this warehouse answers every topic as the tables say.
    assert_lookup_matches_dump(backfill.warehouse, dump)


@pytest.mark.parametrize("name", ["12_out_of_order_arrival", "20_random_fleet_seed101"])
def test_one_file_per_micro_batch_gives_the_same_tables(name, backfill, tmp_path):
    lines = fixture_lines(name)
    paths = write_files(tmp_path / "in", split_lines(lines, 6, random.Random(7)))
    assert backfill([tmp_path / "in"], max_files_per_trigger=1) == expected_dump(name)
    progress = DeltaTable(str(backfill.warehouse / PROGRESS)).to_pyarrow_table().to_pylist()
    assert len(progress) >= len(paths)  # one micro-batch per file, then the watermark's own
    assert sum(r["input_rows"] for r in progress) == len(lines)
    assert sum(r["late"] for r in progress) == 0


def test_file_order_does_not_matter(backfill, tmp_path):
    name = "20_random_fleet_seed202"
    rng = random.Random(11)
    chunks = split_lines(fixture_lines(name), 8, rng)
    paths = write_files(tmp_path / "in", chunks)
    order = list(range(len(paths)))
    rng.shuffle(order)
    set_mtimes(paths, order)
    # Given as files in shuffled order (modification times shuffled the same way)
    assert backfill([paths[i] for i in order]) == expected_dump(name)


def test_gzip_archives_in_nested_folders(backfill, tmp_path):
    import gzip

    name = "20_random_fleet_seed101"
    chunks = split_lines(fixture_lines(name), 3, random.Random(3))
    for i, chunk in enumerate(chunks):
        folder = tmp_path / "archive" / f"day-{i}"
        folder.mkdir(parents=True)
        (folder / f"events-{i}.jsonl.gz").write_bytes(
            gzip.compress("".join(line + "\n" for line in chunk).encode())
        )
    (tmp_path / "archive" / "README.txt").write_text("not an archive: ignored")
    assert backfill([tmp_path / "archive"]) == expected_dump(name)


def test_rerun_over_same_input_is_a_no_op(backfill):
    source = GOLDEN / "08_role_switch" / "events.jsonl"
    first = backfill([source])
    versions = table_versions(backfill.warehouse)
    assert backfill([source]) == first
    assert table_versions(backfill.warehouse) == versions


@pytest.mark.parametrize("offset_ms", [-100_000, 25_000, 400_000])
def test_as_of_gives_state_at_that_time(offset_ms, backfill):
    name = "04_expiry_default_120s"
    lines = fixture_lines(name)
    first_time = 1_764_000_000_000
    as_of = first_time + 130_000 + offset_ms
    dump = backfill([GOLDEN / name / "events.jsonl"], as_of=as_of)
    assert dump["watermark"] == as_of
    assert dump == reference_dump(lines, as_of)


def test_tables_have_change_data_feed(backfill):
    backfill([GOLDEN / "01_master_registers" / "events.jsonl"])
    for table in ROUTE_TABLES:
        config = DeltaTable(str(backfill.warehouse / table)).metadata().configuration
        assert config.get("delta.enableChangeDataFeed") == "true"


@pytest.mark.parametrize("seed,collectors", [(11, 2), (12, 1)])
def test_random_history_in_random_batches_equals_sequential_replay(
    seed, collectors, backfill, tmp_path
):
    """Property: a seeded random fleet history (faults, role switches, disorder < delay) as
    one or two collectors publish it (connections, their closes after crashes and clean
    shutdowns, idle and stale closes, collector restarts), cut into random files read one per
    micro-batch, gives the plain replay's State(W)."""
    rng = random.Random(seed)
    history = random_history(seed, rng, collectors)
    assert any(event["eventType"] == "CHANNEL_CLOSED" for event in history)
    lines = [json.dumps(event) for event in history]
    write_files(tmp_path / "in", split_lines(lines, rng.randint(3, 6), rng))
    assert backfill([tmp_path / "in"], max_files_per_trigger=1) == reference_dump(lines)
